"""The schema's migrations rendered for a ClickHouse cluster (`gpubill db migrate --cluster NAME`).

Pure text: no client. `render_migrations(cluster)` takes every shipped migration, oldest first,
and returns each one's statements as a cluster runs them:

- every DDL statement gets `ON CLUSTER <cluster>`;
- a *sharded* table (CATALOGUE, `Sharding`) becomes `<name>_local`, a
  `Replicated<Kind>MergeTree('/clickhouse/gpubill/tables/{shard}/{database}/<name>_local',
  '{replica}', <the original engine's arguments>)` on every server, and in front of it `<name>`,
  `Distributed(<cluster>, currentDatabase(), <name>_local, <sharding key>)`: the application
  reads and writes `<name>` as before;
- a table held *whole* on every server (WHOLE) keeps its name, with
  `Replicated<Kind>MergeTree('/clickhouse/gpubill/tables/all/{database}/<name>', '{replica}', …)`
  (`{replica}` is unique cluster-wide, so every server is a replica of the one copy);
- a table created again under a name used before (0020 and 0026 rename a table away, create
  its successor and drop the old one) gets the migration's version after its path
  (`…/invoices_local_0020`): the renamed table still holds the first path in Keeper;
- an INSERT … SELECT runs once, on the server `migrate` talks to, through the same names
  (MIGRATION_SETTINGS: synchronous inserts through Distributed tables, GLOBAL subqueries).

Why a sharding key must contain the deduplication key: ReplacingMergeTree collapses rows of one
ORDER BY key only within one table on one server, and FINAL over a Distributed table is FINAL on
each shard. A key that is a function of ORDER BY columns sends a row and its duplicate to the same
shard, where they meet. `_check_sharding` refuses any other.

Every statement is classified (`_STATEMENTS`); one this module does not know is refused with
ClusterSchemaError naming the migration and the statement, never passed through: a future
migration cannot be rendered wrong in silence.

The application's own mutations (a lightweight DELETE, `ALTER TABLE … DROP PARTITION | DELETE`)
name their table through `mutation_target(table, cluster)`: ClickHouse refuses them on a
Distributed table, so on a cluster a sharded table's go to `<name>_local ON CLUSTER <cluster>`
(one replica of every shard runs it; Keeper replicates it to the others), and a whole table's to
the table itself, on the one server the client talks to (Keeper replicates it to every server;
ON CLUSTER would queue the same mutation once per shard on the one replicated table).
tests/unit/test_cluster_app.py holds every DELETE FROM / ALTER TABLE the application writes to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from warehouse.errors import ClusterSchemaError
from warehouse.migrations import SCHEMA_MIGRATIONS_DDL, migrations, split_statements

KEEPER_ROOT = "/clickhouse/gpubill/tables"

# Settings for every statement of a cluster migration (ignored by the DDL): an INSERT … SELECT
# through a Distributed table writes every shard before it returns (the next statement may read
# or drop its source), and a subquery over a Distributed table inside a query over another one
# runs once, GLOBAL, instead of being refused ("double-distributed").
MIGRATION_SETTINGS: dict[str, int | str] = {"distributed_foreground_insert": 1, "distributed_product_mode": "global"}


@dataclass(frozen=True)
class Sharding:
    """How a sharded table's rows are spread: `key` (a ClickHouse expression) of `columns`."""

    key: str
    columns: tuple[str, ...]


BY_CARD = Sharding("cityHash64(gpu_uuid)", ("gpu_uuid",))
BY_TENANT = Sharding("cityHash64(tenant)", ("tenant",))

# The table catalogue: every table a migration creates, sharded or whole, in one place
# (tests/unit/test_cluster_schema.py holds it to the migrations). Sharded: the tables that grow
# with the fleet (per card-second, card-hour) by card, and money per tenant by tenant, each with
# the column in its ORDER BY. Whole: every other table, with why.
SHARDED: dict[str, Sharding] = {
    "readings_usage": BY_CARD,
    "readings_power": BY_CARD,
    "rated_seconds": BY_CARD,
    "conflicts": BY_CARD,
    "rated_hours": BY_CARD,       # ORDER BY has tenant too: rated rows go by card, beside their seconds
    "card_models": BY_CARD,       # AggregatingMergeTree: one card's rows must meet to aggregate
    "rerate_seconds": BY_CARD,
    "invoices": BY_TENANT,
    "invoice_lines": BY_TENANT,
    "allocations": BY_TENANT,
    "write_offs": BY_TENANT,
    "budgets": BY_TENANT,
    "live_spend": BY_TENANT,
    "webhook_deliveries": BY_TENANT,
}

_NO_CARD_OR_TENANT = "its key has neither card nor tenant"
WHOLE: dict[str, str] = {
    "schema_migrations": "the migrations' record: every server answers what is applied",
    "deadletters": f"{_NO_CARD_OR_TENANT} (Kafka position)",
    "cost_share": f"{_NO_CARD_OR_TENANT} (period, site, model); a few rows a month",
    "billing_runs": f"{_NO_CARD_OR_TENANT} (period)",
    "rollup_runs": f"{_NO_CARD_OR_TENANT} (period, hour); read as an IN-set by every shard's rated_hours",
    "rated_writes": f"{_NO_CARD_OR_TENANT} (period, hour); read as an IN-set by every shard",
    "retention_runs": f"{_NO_CARD_OR_TENANT} (period)",
    "archives": f"{_NO_CARD_OR_TENANT} (period, directory)",
    "tenants": "the registry, read as an IN-set beside every shard's rows; small",
    "invoice_locks": "the invoicing lease: one copy, a handful of rows",
    "api_keys": f"{_NO_CARD_OR_TENANT} (key id); small, read on every request",
    "api_access_log": f"{_NO_CARD_OR_TENANT} (time, key id)",
    "balance_ledger": f"{_NO_CARD_OR_TENANT} (ref)",
    "credit_notes": f"{_NO_CARD_OR_TENANT} (number)",
    "credit_note_lines": f"{_NO_CARD_OR_TENANT} (number, line)",
    "invoice_journal": f"{_NO_CARD_OR_TENANT} (invoice, time, action, document)",
    "corrections": f"{_NO_CARD_OR_TENANT} (Kafka position); few, read against every shard's rows",
    "correction_conflicts": f"{_NO_CARD_OR_TENANT} (Kafka position)",
    "rerate_terms": "scratch price terms of one re-rating, joined against every shard's rows; small",
    "rerate_runs": f"{_NO_CARD_OR_TENANT} (period, generation)",
    "audit_hours": f"{_NO_CARD_OR_TENANT} (period, hour)",
    "rated_revisions": f"{_NO_CARD_OR_TENANT} (period, hour, revision)",
    "books_positions": f"{_NO_CARD_OR_TENANT} (topic, partition)",
    "rule_sets": f"{_NO_CARD_OR_TENANT} (revision)",
    "invoice_parties": f"{_NO_CARD_OR_TENANT} (invoice id)",
    "payments": f"{_NO_CARD_OR_TENANT} (ref)",
    "payment_reversals": f"{_NO_CARD_OR_TENANT} (ref)",
    "refunds": f"{_NO_CARD_OR_TENANT} (ref)",
    "invoice_terms": f"{_NO_CARD_OR_TENANT} (invoice number)",
    "dunning_notices": f"{_NO_CARD_OR_TENANT} (invoice, kind, days)",
}

# Settings of a MergeTree that mean something else on a Replicated one, and what they become.
# non_replicated_deduplication_window: a replicated table deduplicates inserted blocks in Keeper,
# by replicated_deduplication_window; the same number of blocks is kept.
TRANSLATED_SETTINGS = {"non_replicated_deduplication_window": "replicated_deduplication_window"}

NAME = r"[a-z_][a-z0-9_]*"
CLUSTER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class _Table:
    """What the renderer knows of a table while it walks the migrations."""

    sharding: Sharding | None  # None: whole on every server
    order_by: tuple[str, ...]
    path: str                  # its Keeper path (the local table's for a sharded one)


@dataclass
class _Walk:
    """The tables as the migrations so far leave them, and every Keeper path ever used."""

    cluster: str
    version: int = 0
    name: str = ""
    tables: dict[str, _Table] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    paths_used: set[str] = field(default_factory=set)


def check_cluster_name(cluster: str) -> str:
    """The cluster's name as given, if it is a plain identifier (ON CLUSTER and Distributed take it bare)."""
    if not CLUSTER_NAME.match(cluster):
        raise ClusterSchemaError(f"--cluster {cluster!r}: a cluster name is letters, digits and '_' "
                                 "(the name under remote_servers in the servers' config)")
    return cluster


def mutation_target(table: str, cluster: str) -> str:
    """Where the application's mutation of `table` goes (`DELETE FROM <it> WHERE …`,
    `ALTER TABLE <it> DROP PARTITION …`): `table` itself on a single server (`cluster` empty) and
    for a table held whole on every server; `<table>_local ON CLUSTER <cluster>` for a sharded one.
    Raises ClusterSchemaError for a table the catalogue does not name (a typo fails on one server too)."""
    if table not in SHARDED and table not in WHOLE:
        raise ClusterSchemaError(f"mutation of {table}: a table in neither SHARDED nor WHOLE of warehouse/cluster.py")
    if not cluster or table in WHOLE:
        return table
    return f"{table}_local ON CLUSTER {check_cluster_name(cluster)}"


def render_migrations(cluster: str, shipped: list[tuple[int, str, str]] | None = None) -> list[tuple[int, str, list[str]]]:
    """(version, file name, cluster statements) of every migration (`shipped`, default the shipped
    ones), oldest first. The first entry, version 0, creates `schema_migrations` (whole).
    Raises ClusterSchemaError for a statement it cannot render, naming migration and statement."""
    walk = _Walk(check_cluster_name(cluster))
    walk.name = "schema_migrations (warehouse/migrations.py)"
    rendered = [(0, "schema_migrations", _render(walk, 1, SCHEMA_MIGRATIONS_DDL))]
    for version, name, sql in migrations() if shipped is None else shipped:
        walk.version, walk.name = version, name
        statements = []
        for number, statement in enumerate(split_statements(sql), start=1):
            statements.extend(_render(walk, number, statement))
        rendered.append((version, name, statements))
    # The catalogue's self-check: a table no statement created (a typo, a table renamed in the
    # catalogue but not in the migrations) would be a rule that never applies.
    stale = sorted((set(SHARDED) | set(WHOLE)) - walk.created)
    if stale:
        raise ClusterSchemaError(f"warehouse/cluster.py's catalogue names tables no migration creates: {', '.join(stale)}")
    return rendered


# --- the statements ---------------------------------------------------------------------------


def _render(walk: _Walk, number: int, statement: str) -> list[str]:
    text = _strip_comments(statement).strip()
    for pattern, render in _STATEMENTS:
        match = pattern.match(text)
        if match:
            try:
                return render(walk, match)
            except _Refused as why:
                raise _refusal(walk, number, text, str(why)) from None
    raise _refusal(walk, number, text, "a kind of statement the cluster renderer does not know "
                   "(warehouse/cluster.py _STATEMENTS)")


class _Refused(Exception):
    """Why one statement cannot be rendered; `_render` names the migration and statement."""


def _refusal(walk: _Walk, number: int, text: str, why: str) -> ClusterSchemaError:
    head = " ".join(text.split())[:80]
    return ClusterSchemaError(f"cannot render migration {walk.name} statement {number} ({head} …) for a cluster: "
                              f"{why}; teach warehouse/cluster.py this statement before shipping the migration")


def _create_table(walk: _Walk, match: re.Match) -> list[str]:
    name, body = match.group("name"), match.group("body")
    if name in walk.tables:
        raise _Refused(f"table {name} exists already at this point of the migrations")
    columns, rest = _parenthesized(body)
    engine = re.match(r"ENGINE\s*=\s*(?P<kind>\w*)MergeTree\b\s*(?P<args>\(.*?\))?(?P<rest>\s.*)?$", rest, re.S)
    if engine is None:
        raise _Refused("only MergeTree-family engines are rendered")
    order_by = _order_by(rest)
    sharding = _placement(name)
    walk.created.add(name)
    args = engine.group("args")
    inner = args[1:-1].strip() if args else ""
    table_rest = (engine.group("rest") or "").strip()
    exists = "IF NOT EXISTS " if match.group("ine") else ""
    on = f"ON CLUSTER {walk.cluster}"
    if sharding is None:
        path = _path(walk, f"{KEEPER_ROOT}/all/{{database}}/{name}")
        walk.tables[name] = _Table(None, order_by, path)
        return [f"CREATE TABLE {exists}{name} {on}\n(\n{columns}\n)\n"
                f"ENGINE = {_replicated(engine.group('kind'), path, inner)}\n{table_rest}"]
    _check_sharding(name, sharding, order_by)
    path = _path(walk, f"{KEEPER_ROOT}/{{shard}}/{{database}}/{name}_local")
    walk.tables[name] = _Table(sharding, order_by, path)
    return [f"CREATE TABLE {exists}{name}_local {on}\n(\n{columns}\n)\n"
            f"ENGINE = {_replicated(engine.group('kind'), path, inner)}\n{table_rest}",
            _distributed(walk, name, exists)]


def _create_view(walk: _Walk, match: re.Match) -> list[str]:
    # A view reads the names the application reads: Distributed tables (all shards) and whole ones.
    exists = "IF NOT EXISTS " if match.group("ine") else ""
    return [f"CREATE VIEW {exists}{match.group('name')} ON CLUSTER {walk.cluster} AS\n{match.group('body')}"]


def _materialized_view(walk: _Walk, match: re.Match) -> list[str]:
    raise _Refused("a materialized view fires on inserts into its source table on the server that "
                   "takes them: on a cluster it must read a *_local table and write a local one, a design "
                   "to add here when a migration first needs one")


def _drop(walk: _Walk, match: re.Match) -> list[str]:
    kind, name = match.group("kind").upper(), match.group("name")
    exists = "IF EXISTS " if match.group("ie") else ""
    on = f"ON CLUSTER {walk.cluster}"
    if kind == "VIEW":
        return [f"DROP VIEW {exists}{name} {on}"]
    table = walk.tables.pop(name, None)
    if table is None:
        raise _Refused(f"table {name} does not exist at this point of the migrations")
    # SYNC: a replicated table's Keeper data goes now, not after the Atomic database's delay.
    if table.sharding is None:
        return [f"DROP TABLE {exists}{name} {on} SYNC"]
    return [f"DROP TABLE {exists}{name} {on} SYNC", f"DROP TABLE {exists}{name}_local {on} SYNC"]


def _rename(walk: _Walk, match: re.Match) -> list[str]:
    pairs = re.findall(rf"({NAME})\s+TO\s+({NAME})\s*(?:,|$)", match.group("pairs").strip())
    if ", ".join(f"{a} TO {b}" for a, b in pairs) != " ".join(match.group("pairs").split()):
        raise _Refused("RENAME TABLE a TO b[, c TO d]: plain names only")
    on = f"ON CLUSTER {walk.cluster}"
    out = []
    for old, new in pairs:
        table = walk.tables.pop(old, None)
        if table is None or new in walk.tables:
            raise _Refused(f"cannot rename {old} to {new} at this point of the migrations")
        walk.tables[new] = table  # the same Keeper path: ClickHouse keeps it across a rename
        if table.sharding is None:
            out.append(f"RENAME TABLE {old} TO {new} {on}")
            continue
        # The Distributed table names its local table: a renamed one would still read the old
        # name (soon a new, empty table). It is dropped and made again over the renamed local one.
        out += [f"RENAME TABLE {old}_local TO {new}_local {on}", f"DROP TABLE {old} {on} SYNC",
                _distributed(walk, new, "")]
    return out


def _insert_select(walk: _Walk, match: re.Match) -> list[str]:
    # No ON CLUSTER for an INSERT: it runs once, on the server `migrate` talks to, and reaches
    # every shard and replica through the Distributed or replicated table it names.
    name = match.group("name")
    if name not in walk.tables:
        raise _Refused(f"INSERT into {name}, which does not exist at this point of the migrations")
    return [match.group(0)]


_ALTER_COMMANDS = [
    ("column", re.compile(r"^(ADD|MODIFY|DROP|RENAME|COMMENT)\s+COLUMN\b", re.I)),
    ("order", re.compile(r"^MODIFY\s+ORDER\s+BY\b", re.I)),
    ("setting", re.compile(r"^MODIFY\s+SETTING\s+(?P<settings>.+)$", re.I | re.S)),
]


def _alter(walk: _Walk, match: re.Match) -> list[str]:
    name = match.group("name")
    table = walk.tables.get(name)
    if table is None:
        raise _Refused(f"ALTER of {name}, which does not exist at this point of the migrations")
    local_commands, column_commands = [], []
    for command in _alter_commands(match.group("commands")):
        kind = next((kind for kind, pattern in _ALTER_COMMANDS if pattern.match(command)), None)
        if kind is None:
            raise _Refused(f"ALTER command {command.split()[0:2]} (only ADD/MODIFY/DROP/RENAME/COMMENT COLUMN, "
                           "MODIFY ORDER BY and MODIFY SETTING are rendered)")
        if kind == "setting":
            command = _translate_settings(command)
            if command is None:
                continue
        if kind == "order":
            table.order_by = _order_by(command[len("MODIFY "):])
            if table.sharding is not None:
                _check_sharding(name, table.sharding, table.order_by)
        local_commands.append(command)
        if kind == "column":
            column_commands.append(command)
    on = f"ON CLUSTER {walk.cluster}"
    if not local_commands:
        return []
    if table.sharding is None:
        return [f"ALTER TABLE {name} {on}\n    " + ",\n    ".join(local_commands)]
    out = [f"ALTER TABLE {name}_local {on}\n    " + ",\n    ".join(local_commands)]
    if column_commands:  # a Distributed table has the columns of its local one, and nothing else
        out.append(f"ALTER TABLE {name} {on}\n    " + ",\n    ".join(column_commands))
    return out


def _alter_commands(text: str) -> list[str]:
    """An ALTER's commands: its comma-separated parts, with `MODIFY SETTING a = 1, b = 2` kept whole."""
    commands: list[str] = []
    for part in _split_top(text):
        if commands and re.match(r"^MODIFY\s+SETTING\b", commands[-1], re.I) and re.match(r"^\w+\s*=", part):
            commands[-1] += f", {part}"
        else:
            commands.append(part)
    return commands


def _translate_settings(command: str) -> str | None:
    """MODIFY SETTING with TRANSLATED_SETTINGS' names replaced; None when nothing is left."""
    settings = re.match(r"^MODIFY\s+SETTING\s+(.+)$", command, re.I | re.S).group(1)
    kept = []
    for setting in _split_top(settings):
        pair = re.match(r"^(\w+)\s*=\s*(.+)$", setting, re.S)
        if pair is None:
            raise _Refused(f"MODIFY SETTING {setting!r}: name = value expected")
        kept.append(f"{TRANSLATED_SETTINGS.get(pair.group(1), pair.group(1))} = {pair.group(2).strip()}")
    return f"MODIFY SETTING {', '.join(kept)}" if kept else None


_STATEMENTS: list[tuple[re.Pattern, Callable[[_Walk, re.Match], list[str]]]] = [
    (re.compile(rf"^CREATE\s+TABLE\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?(?P<name>{NAME})\s*(?P<body>\(.*)$", re.I | re.S),
     _create_table),
    (re.compile(r"^CREATE\s+MATERIALIZED\s+VIEW\b", re.I), _materialized_view),
    (re.compile(rf"^CREATE\s+VIEW\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?(?P<name>{NAME})\s+AS\s+(?P<body>SELECT\b.*)$",
                re.I | re.S), _create_view),
    (re.compile(rf"^DROP\s+(?P<kind>TABLE|VIEW)\s+(?P<ie>IF\s+EXISTS\s+)?(?P<name>{NAME})$", re.I), _drop),
    (re.compile(r"^RENAME\s+TABLE\s+(?P<pairs>.+)$", re.I | re.S), _rename),
    (re.compile(rf"^INSERT\s+INTO\s+(?P<name>{NAME})\b(?:\s*\([\w\s,]*\))?\s+SELECT\b.*$", re.I | re.S),
     _insert_select),
    (re.compile(rf"^ALTER\s+TABLE\s+(?P<name>{NAME})\s+(?P<commands>.+)$", re.I | re.S), _alter),
]


# --- pieces -----------------------------------------------------------------------------------


def _placement(name: str) -> Sharding | None:
    if name in SHARDED:
        return SHARDED[name]
    if name in WHOLE:
        return None
    raise _Refused(f"table {name} is in neither SHARDED nor WHOLE of warehouse/cluster.py's catalogue")


def _check_sharding(name: str, sharding: Sharding, order_by: tuple[str, ...]) -> None:
    missing = [column for column in sharding.columns if column not in order_by]
    if missing:
        raise _Refused(f"{name}'s sharding key {sharding.key} uses {', '.join(missing)}, not in its ORDER BY "
                       f"({', '.join(order_by)}): a duplicate could land on another shard than its twin")


def _path(walk: _Walk, path: str) -> str:
    if path in walk.paths_used:
        path = f"{path}_{walk.version:04d}"
    if path in walk.paths_used:
        raise _Refused(f"Keeper path {path} is used twice")
    walk.paths_used.add(path)
    return path


def _replicated(kind: str, path: str, args: str) -> str:
    return f"Replicated{kind}MergeTree('{path}', '{{replica}}'{', ' + args if args else ''})"


def _distributed(walk: _Walk, name: str, exists: str) -> str:
    key = walk.tables[name].sharding.key
    return (f"CREATE TABLE {exists}{name} ON CLUSTER {walk.cluster} AS {name}_local\n"
            f"ENGINE = Distributed({walk.cluster}, currentDatabase(), {name}_local, {key})")


def _order_by(text: str) -> tuple[str, ...]:
    """The plain column names of an ORDER BY clause in `text` (a tuple or one column)."""
    match = re.search(r"\bORDER\s+BY\s+(\([^()]*\)|\w+)", text, re.I)
    if match is None:
        raise _Refused("a table without ORDER BY")
    names = tuple(part.strip() for part in match.group(1).strip("()").split(","))
    if not all(re.fullmatch(NAME, part) for part in names):
        raise _Refused(f"ORDER BY {match.group(1)}: only plain columns are understood")
    return names


def _parenthesized(text: str) -> tuple[str, str]:
    """('inside of the leading parenthesis', 'what follows it'); quotes respected."""
    depth, quoted = 0, False
    for at, char in enumerate(text):
        if quoted:
            quoted = not (char == "'" and text[at - 1] != "\\")
        elif char == "'":
            quoted = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return text[1:at].strip("\n"), text[at + 1 :].strip()
    raise _Refused("unbalanced parentheses")


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside parentheses and quotes, each part stripped."""
    parts, depth, quoted, start = [], 0, False, 0
    for at, char in enumerate(text):
        if quoted:
            quoted = not (char == "'" and text[at - 1] != "\\")
        elif char == "'":
            quoted = True
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:at].strip())
            start = at + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part]


def _strip_comments(statement: str) -> str:
    """`statement` without its `-- …` comments (outside quotes), trailing spaces dropped."""
    out, quoted, at = [], False, 0
    while at < len(statement):
        char = statement[at]
        if quoted:
            quoted = not (char == "'" and statement[at - 1] != "\\")
        elif char == "'":
            quoted = True
        elif statement.startswith("--", at):
            at = statement.find("\n", at)
            if at < 0:
                break
            continue
        out.append(char)
        at += 1
    return "\n".join(line.rstrip() for line in "".join(out).splitlines())
