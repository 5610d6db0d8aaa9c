"""What SQL the gateway lets reach the engine: what the product needs, nothing else.

Longer than 400 lines on purpose: the guard is one security boundary, every check a
statement passes, from its text to each node of its parse, in one file to review. The tree
helpers at the bottom decide which names belong to a WITH and which are tables; split from
the checks they serve, a change to one would be reviewed without the other.

The guard allows (gateway/allowed.py) rather than refuses: a statement runs only when every
part of ClickHouse's own parse of it is on a list —

- its kind (SELECT, DESCRIBE, SHOW, EXISTS for both users; INSERT, CREATE, ALTER, DROP,
  OPTIMIZE, RENAME, TRUNCATE, DELETE for the pipeline's user) and every node of its tree;
- every table it names: a table or view of the project's database (read from
  system.tables at start-up and after every CREATE, DROP and RENAME), or a listed system
  table — so no file can stand in for a table (chDB's `default` database opens a file named
  as a table: SELECT * FROM `/etc/passwd`), and a name that is neither is UNKNOWN_TABLE;
  the bare name right of IN (`x IN name`) is a table to ClickHouse, so it is one of these
  or a WITH name in scope; for the read-only user, no column of
  allowed.READER_HIDDEN_COLUMNS (api_keys.secret_sha256), nor `*` where its table is named;
- every function: listed scalar functions, aggregate functions and their combinators, listed
  table functions (numbers, values, view, …), listed engines (MergeTree family, Memory, …,
  none that reads another table);
- every setting (URL parameters, form fields, SETTINGS clauses): listed for the user; the
  finance user may set only what clickhouse-connect sends by itself, and in the URL the
  harmless values of allowed.HARMLESS_SETTING_VALUES (extremes=0);
- every format (FORMAT clauses, default_format): listed formats, none with a schema file or
  a registry URL.

How, so that comments, casing, escapes and nesting do not matter — ClickHouse's own parser
decides, on the engine, before the statement runs:

1. the raw text (`check_text`): no `;` but a trailing one (chDB runs every statement of a
   multi-statement text), and no INFILE/OUTFILE keyword;
2. `EXPLAIN AST <sql>` (`inspect`): refuses what cannot be parsed, then checks every node at
   any depth — subqueries, WITH, view(), CREATE … AS SELECT included;
3. `formatQuery(<sql>)` (`inspect`): the canonical text, in which settings, formats and
   quoted identifiers are written plainly (`read\\x6fnly` becomes readonly); a quoted
   identifier holding a dot or a slash (a path, or `db.t` passed off as one name) is refused.

The pipeline's inserts (`INSERT INTO t (cols) FORMAT Native` + data) skip 2 and 3: the
`PLAIN_INSERT` pattern accepts only a known table, plain column names and a listed input
format (a regex match and two set look-ups, microseconds). Their data cannot carry
expressions either: every statement runs with input_format_values_interpret_expressions=0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpubill.devenv.gateway import allowed
from gpubill.devenv.gateway.request import GatewayError, refusal

ACCESS_DENIED = 497
SETTING_CONSTRAINT_VIOLATION = 452
CANNOT_PARSE = 62  # SYNTAX_ERROR
UNKNOWN_TABLE = 60
UNKNOWN_FORMAT = 73
READER_USER = "finance"

_IDENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[A-Za-z_][A-Za-z0-9_]*`)"
PLAIN_INSERT = re.compile(
    rf"INSERT INTO (?:({_IDENT})\.)?(?!(?:FUNCTION|TABLE)\b)({_IDENT}) ?\({_IDENT}(?:, ?{_IDENT})*\) FORMAT ([A-Za-z][A-Za-z0-9]*)",
    re.ASCII | re.IGNORECASE)
PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$", re.ASCII)
FILE_KEYWORDS = re.compile(r"(?<![A-Za-z0-9_$])(INFILE|OUTFILE)(?![A-Za-z0-9_$])", re.IGNORECASE)
AST_LINE = re.compile(r"^( *)([A-Za-z][^\n]*)$")
STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'", re.DOTALL)
QUOTED_IDENTIFIER = re.compile(r"`((?:[^`\\]|\\.|``)*)`", re.DOTALL)
SETTINGS_CLAUSE = re.compile(r"\b(?:SETTINGS|MODIFY SETTING)\s+")  # a statement's, or ALTER TABLE's of a table
SETTING_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
FORMAT_CLAUSE = re.compile(r"\bFORMAT\s+`?([A-Za-z][A-Za-z0-9_]*)")
CTE_NAME = re.compile(r"(`(?:[^`\\]|\\.)*`|[A-Za-z_][A-Za-z0-9_]*) AS\n\s*\(")  # `name AS\n    (` of a WITH
CREATE_AS_TABLE = re.compile(r"^CREATE (?:OR REPLACE )?(?:TEMPORARY )?TABLE (?:IF NOT EXISTS )?\S+ AS "
                             r"(?!SELECT\b|WITH\b|\()(\S+)")
DATABASE_DDL = re.compile(r"^\s*(?:CREATE|DROP|ATTACH|DETACH|RENAME|UNDROP)\s+(?:OR REPLACE\s+)?DATABASE\b",
                          re.IGNORECASE)


@dataclass(frozen=True)
class Limits:
    """What every statement runs under (the gateway's settings, forced after the client's)."""

    max_execution_s: int = 300
    max_memory_bytes: int = 4 << 30

    def forced_settings(self, readonly: int, *, max_execution_s: int | None = None) -> dict[str, str]:
        """The settings the engine applies after the client's, in this order (readonly last,
        so that it cannot refuse the others). readonly: 0 read-write, 1 reader, 2 GET;
        `max_execution_s`: a client's shorter time limit (a longer one is the gateway's)."""
        forced = {
            "max_execution_time": str(min(self.max_execution_s, max_execution_s or self.max_execution_s)),
            "max_memory_usage": str(self.max_memory_bytes),
            "input_format_values_interpret_expressions": "0",
            "input_format_values_deduce_templates_of_expressions": "0",
        }
        if readonly:
            forced["readonly"] = str(readonly)
        return forced


@dataclass(frozen=True)
class Node:
    depth: int
    words: tuple[str, ...]
    parent: int  # index of the parent node, -1 for the statement

    @property
    def label(self) -> str:
        return self.words[0]


class SqlGuard:
    """Decides whether a statement of a user may run (see the module docstring).

    `aggregates` and `combinators` come from the engine's own system tables at start-up
    (system.functions where is_aggregate, system.aggregate_function_combinators; the names
    system.functions marks case_insensitive), `engines`
    from system.table_engines (to tell an engine from a function in a CREATE's storage
    clause), `tables` from system.tables of `database`."""

    def __init__(self, *, database: str = "default", tables: Iterable[str] = (), aggregates: Iterable[str] = (),
                 combinators: Iterable[str] = (), engines: Iterable[str] = (),
                 case_insensitive: Iterable[str] = ()) -> None:
        self.database = database
        # names ClickHouse matches in any case (SUM, Count, IF): the lists hold their canonical spelling
        self.case_insensitive = {name.lower(): name for name in case_insensitive}
        self.tables = frozenset(tables)
        self.aggregates = frozenset(aggregates) - allowed.IO_FUNCTIONS
        self.combinators = tuple(sorted(combinators, key=len, reverse=True))
        self.engines = frozenset(engines) | allowed.ENGINES

    # ------------------------------------------------------------------ pure, before the engine

    def set_tables(self, tables: Iterable[str]) -> None:
        """The project's tables and views now (after a DDL statement, from system.tables)."""
        self.tables = frozenset(tables)

    def forget_tables(self, names: Iterable[str]) -> None:
        """Before a DROP or RENAME runs: its tables are no longer readable through the guard,
        even by a statement checked while it runs."""
        self.tables = self.tables - set(names)

    @staticmethod
    def check_settings(settings: dict[str, str], user: str) -> None:
        """Client settings (URL parameters, form fields) not listed for `user`, nor listed with
        their value as harmless, are refused."""
        permitted = allowed.READER_SETTINGS if user == READER_USER else allowed.WRITER_SETTINGS
        for name, value in settings.items():
            if name not in permitted and value.strip() not in allowed.HARMLESS_SETTING_VALUES.get(name, ()):
                raise _fixed(name)

    def check_database(self, database: str | None) -> None:
        """The `database` parameter may only name the project's database."""
        if database not in (None, "", self.database):
            raise refusal(81, "UNKNOWN_DATABASE", f"the gpubill gateway serves database {self.database!r} only", 404)

    @staticmethod
    def check_format(name: str, *, insert: bool) -> None:
        permitted = allowed.INPUT_FORMATS if insert else allowed.OUTPUT_FORMATS
        if name not in permitted:
            raise refusal(UNKNOWN_FORMAT, "UNKNOWN_FORMAT", f"format {name[:64]} is not served by the gpubill gateway "
                          "(formats with schema files or registry URLs never are)", 403)

    def plain_insert(self, sql: str) -> str | None:
        """The table of `INSERT INTO [db.]t (cols) FORMAT x` with plain identifiers, a known
        table and a listed input format; None for anything else (it goes to the parser)."""
        match = PLAIN_INSERT.fullmatch(sql)
        if match is None:
            return None
        database, table, fmt = (part.strip("`") if part else part for part in match.groups())
        if database not in (None, self.database) or table not in self.tables or fmt not in allowed.INPUT_FORMATS:
            return None
        return table

    @staticmethod
    def is_plain_insert(sql: str) -> bool:
        """The shape alone (no table or format check): for tests of the pattern."""
        return PLAIN_INSERT.fullmatch(sql) is not None

    @staticmethod
    def check_text(sql: str) -> None:
        """Step 1 (pure, before anything runs): one statement, no INFILE/OUTFILE."""
        if ";" in sql.rstrip().rstrip(";"):
            raise _denied("one statement per request: a ';' may only end it")
        keyword = FILE_KEYWORDS.search(sql)
        if keyword:
            raise _denied(f"{keyword.group(1).upper()} reaches files on the gateway's host")

    # ------------------------------------------------------------------ on ClickHouse's parse

    def inspect(self, formatted: str, ast: str, user: str) -> str:
        """Steps 2 and 3: `ast` is EXPLAIN AST's text, `formatted` formatQuery's. Returns the
        statement's kind (EXPLAIN AST's first node); raises GatewayError to refuse."""
        nodes = _parse_ast(ast)
        kind = nodes[0].label
        permitted = allowed.READ_STATEMENTS if user == READER_USER else allowed.WRITE_STATEMENTS
        if kind not in permitted:
            raise _denied(f"{_kind_name(kind)} statements are not served"
                          + (" to the read-only user" if kind in allowed.WRITE_STATEMENTS else ""))
        plain = STRING_LITERAL.sub("''", formatted)
        if DATABASE_DDL.match(plain):
            raise _denied("databases are not created, dropped or renamed through the gateway")
        for quoted in QUOTED_IDENTIFIER.findall(plain):
            if "." in quoted or "/" in quoted:
                raise _denied(f"the quoted name `{quoted[:64]}` holds a dot or a slash (a path, or a database and "
                              "a table as one name)")
        ctes, copies = _cte_scopes(nodes, plain)
        for index, node in enumerate(nodes):
            if node.label == "TableIdentifier" and (index in copies or _is_cte(nodes, ctes, index)):
                continue  # a WITH name AS (subquery) in scope (the subquery is checked like the rest)
            self._check_node(nodes, index, node, user)
            if node.label == "Function" and len(node.words) > 1 and node.words[1] in allowed.IN_FUNCTIONS:
                operand = _in_operand(nodes, index)
                if operand is not None and not (operand in copies or _is_cte(nodes, ctes, operand)):
                    self._check_in_table(nodes[operand].words[1] if len(nodes[operand].words) > 1 else "")
        if user == READER_USER:
            self._check_hidden_columns(nodes)
        self._check_statement_tables(nodes, kind, plain)
        self._check_settings_clauses(plain, nodes, kind, user)
        for fmt in FORMAT_CLAUSE.findall(plain):
            self.check_format(fmt, insert=kind == "InsertQuery")
        return kind

    def statement_tables(self, ast: str) -> list[str]:
        """The tables a DROP or RENAME names (their direct identifiers, databases left out)."""
        nodes = _parse_ast(ast)
        names = [node.words[1] for node in nodes[1:] if node.parent == 0 and node.label == "Identifier"
                 and len(node.words) > 1]
        return [name for name in names if name != self.database]

    def _check_node(self, nodes: list[Node], index: int, node: Node, user: str) -> None:
        label = node.label
        if label not in allowed.AST_NODES:
            raise _denied(f"{label} is not served" if label != "Dictionary" else
                          "dictionaries are not served (their sources reach files and the network)")
        if label == "TableIdentifier":
            self._check_table(node.words[1] if len(node.words) > 1 else "")
        elif label in ("Function", "FunctionWithKeyValueArguments"):
            name = node.words[1] if len(node.words) > 1 else ""
            parent = nodes[node.parent].label if node.parent >= 0 else ""
            if parent in ("TableExpression", "CreateQuery"):  # FROM f(…), CREATE TABLE t AS f(…)
                if name.lower() in allowed.TABLE_FUNCTIONS_ANY_CASE:
                    name = name.lower()
                if name not in allowed.TABLE_FUNCTIONS or name in allowed.IO_TABLE_FUNCTIONS:
                    raise _denied(f"table function {name}() is not served (numbers, values, view and a few more are)")
            elif parent == "Storage" and name in self.engines:
                if not (name.endswith("MergeTree") or name in allowed.ENGINES):
                    raise _denied(f"ENGINE = {name} is not served (MergeTree engines and "
                                  f"{', '.join(sorted(allowed.ENGINES))} are)")
            elif not self._function_allowed(name):
                raise _denied(f"function {name}() is not served by the gateway")

    def _function_allowed(self, name: str) -> bool:
        name = self.case_insensitive.get(name.lower(), name)
        if name in allowed.IO_FUNCTIONS:
            return False
        return name in allowed.SCALAR_FUNCTIONS or self._aggregate(name)

    def _aggregate(self, name: str) -> bool:
        """An aggregate function, or one with combinators (sumIf, uniqExactIfState, …)."""
        if name in self.aggregates:
            return True
        return any(name.endswith(c) and len(name) > len(c) and self._aggregate(name[:-len(c)])
                   for c in self.combinators)

    def _check_in_table(self, name: str) -> None:
        """`x IN name`: ClickHouse reads `name` as a table (a file of that name in the gateway's
        working directory, if no table is called so), so it must be one the guard serves."""
        try:
            self._check_table(name)
        except GatewayError:
            raise _denied(f"`IN {name[:64]}` reads {name[:64]} as a table, and it is not one the gateway serves "
                          "(write IN (SELECT …) for a subquery, or has(array, x) for an array)") from None

    def _check_hidden_columns(self, nodes: list[Node]) -> None:
        """The reader never reads allowed.READER_HIDDEN_COLUMNS (api_keys.secret_sha256): a
        statement that names such a table names its columns one by one, none of them hidden
        (no `*`, `t.*` or COLUMNS(…), which would take them all)."""
        named = {node.words[1].rpartition(".")[2] for node in nodes
                 if node.label == "TableIdentifier" and len(node.words) > 1}
        hidden = set().union(*(allowed.READER_HIDDEN_COLUMNS.get(table, ()) for table in named))
        if not hidden:
            return
        for node in nodes:
            if node.label in allowed.ALL_COLUMNS_NODES:
                raise _denied(f"{', '.join(sorted(hidden))} is not served to the read-only user: name the columns "
                              "instead of *")
            parts = set(node.words[1].split(".")) if node.label == "Identifier" and len(node.words) > 1 else set()
            if parts & hidden:  # t.secret_sha256, a subcolumn of it (secret_sha256.size) too
                raise _denied(f"column {', '.join(sorted(parts & hidden))} is not served to the read-only user")

    def _check_table(self, name: str) -> None:
        database, _, table = name.rpartition(".")
        if database == "system":
            if table not in allowed.SYSTEM_TABLES:
                raise _denied(f"system.{table} is not served (system tables served: "
                              f"{', '.join(sorted(allowed.SYSTEM_TABLES))})")
            return
        if database not in ("", self.database) or table not in self.tables:
            raise _unknown_table(name)

    def _check_statement_tables(self, nodes: list[Node], kind: str, plain: str) -> None:
        """The tables a statement itself names (INSERT INTO t, ALTER TABLE t, …): plain names of
        the project's database; a new one only where a statement creates it."""
        names = [node.words[1] if len(node.words) > 1 else "" for node in nodes[1:]
                 if node.parent == 0 and node.label == "Identifier"]
        names = [name for name in names if name != self.database]
        for name in names:
            if not PLAIN_NAME.match(name):
                raise _denied(f"the table name {name[:64]!r} is not a plain name")
        existing = names[0::2] if kind == "Rename" else [] if kind in ("CreateQuery", "DropQuery") else names
        for name in existing:
            if name not in self.tables:
                raise _unknown_table(name)
        structure = CREATE_AS_TABLE.match(plain)
        if kind == "CreateQuery" and structure:
            self._check_table(structure.group(1).strip("`"))

    def _check_settings_clauses(self, plain: str, nodes: list[Node], kind: str, user: str) -> None:
        names = _setting_names(plain)
        if any(node.label == "Set" for node in nodes) and not names:
            raise refusal(CANNOT_PARSE, "SYNTAX_ERROR", "the gateway cannot read this statement's SETTINGS", 400)
        permitted = allowed.READER_SETTINGS if user == READER_USER else allowed.WRITER_SETTINGS
        if kind in ("CreateQuery", "AlterQuery"):
            permitted = permitted | allowed.STORAGE_SETTINGS
        for name in names:
            if name not in permitted:
                raise _fixed(name)


def _parse_ast(ast: str) -> list[Node]:
    nodes: list[Node] = []
    stack: list[int] = []  # indexes of the open ancestors
    for line in ast.rstrip("\n").split("\n"):
        match = AST_LINE.match(line)
        if not match:
            raise refusal(CANNOT_PARSE, "SYNTAX_ERROR", "the gateway cannot inspect this statement (is a FORMAT "
                          "clause not at its end?)", 400)
        depth = len(match.group(1))
        while stack and nodes[stack[-1]].depth >= depth:
            stack.pop()
        if nodes and not stack:
            raise refusal(CANNOT_PARSE, "SYNTAX_ERROR", "the gateway cannot inspect this statement", 400)
        nodes.append(Node(depth, tuple(match.group(2).split()), stack[-1] if stack else -1))
        stack.append(len(nodes) - 1)
    return nodes


def _cte_scopes(nodes: list[Node], plain: str) -> tuple[list[tuple[str, int, int]], set[int]]:
    """Every WITH name AS (subquery): (name, index of its WithElement, index of the node it is
    visible in), and the nodes of the parser's copies of them.

    EXPLAIN AST shows the elements without their names; the canonical text shows the names in
    the same order. ClickHouse's parser copies the WITH of a UNION's first SELECT into every
    later SELECT of it (so the names are visible in the whole UNION): the copies must equal
    their originals node for node (else refused) and are left out of the pairing; their tables
    are the originals', checked there."""
    elements = [index for index, node in enumerate(nodes) if node.label == "WithElement"]
    if not elements:
        return [], set()
    if re.search(r"\bWITH RECURSIVE\b", plain):
        raise _denied("WITH RECURSIVE is not served")
    by_owner: dict[int, list[int]] = {}
    for element in elements:
        by_owner.setdefault(_owner(nodes, element), []).append(element)
    originals: list[tuple[int, int]] = []  # (element, where it is visible)
    copies: set[int] = set()
    for owner, owned in by_owner.items():
        union, first = _union_of(nodes, owner)
        if union is not None and owner != first:
            if [_subtree(nodes, e)[0] for e in owned] != [_subtree(nodes, e)[0] for e in by_owner.get(first, [])]:
                raise _denied("a WITH in a later SELECT of a UNION is not served (put it before the first)")
            for element in owned:
                copies.update(_subtree(nodes, element)[1])
            continue
        originals += [(element, union if union is not None else owner) for element in owned]
    originals.sort()
    names = [name.strip("`") for name in CTE_NAME.findall(plain)]
    if len(names) != len(originals):
        raise refusal(CANNOT_PARSE, "SYNTAX_ERROR", "the gateway cannot read this statement's WITH clause", 400)
    return [(name, element, scope) for name, (element, scope) in zip(names, originals)], copies


def _in_operand(nodes: list[Node], function: int) -> int | None:
    """The index of the right operand of an IN function at `function` when it is a bare
    identifier (`x IN name`), else None (a subquery, a tuple, a literal: checked as usual)."""
    arguments = function + 1
    if arguments >= len(nodes) or nodes[arguments].parent != function or nodes[arguments].label != "ExpressionList":
        return None
    operands = [i for i in range(arguments + 1, len(nodes)) if nodes[i].parent == arguments]
    if len(operands) == 2 and nodes[operands[1]].label == "Identifier":
        return operands[1]
    return None


def _owner(nodes: list[Node], index: int) -> int:
    """The SELECT a node belongs to (-1: none)."""
    index = nodes[index].parent
    while index >= 0 and nodes[index].label != "SelectQuery":
        index = nodes[index].parent
    return index


def _union_of(nodes: list[Node], select: int) -> tuple[int | None, int | None]:
    """(the SelectWithUnionQuery `select` is a member of, its first member), or (None, None)."""
    members = nodes[select].parent
    union = nodes[members].parent if members >= 0 else -1
    if members < 0 or union < 0 or nodes[members].label != "ExpressionList" \
            or nodes[union].label != "SelectWithUnionQuery":
        return None, None
    first = next(i for i in range(members + 1, len(nodes)) if nodes[i].parent == members)
    return union, first


def _subtree(nodes: list[Node], index: int) -> tuple[list[tuple[int, tuple[str, ...]]], range]:
    """The nodes below `index`, with depths relative to it, and their indexes."""
    depth, end = nodes[index].depth, index + 1
    while end < len(nodes) and nodes[end].depth > depth:
        end += 1
    return [(nodes[i].depth - depth, nodes[i].words) for i in range(index + 1, end)], range(index, end)


def _ancestors(nodes: list[Node], index: int) -> set[int]:
    found = set()
    while index >= 0:
        index = nodes[index].parent
        found.add(index)
    return found


def _is_cte(nodes: list[Node], ctes: list[tuple[str, int, int]], index: int) -> bool:
    """Whether the unqualified TableIdentifier at `index` names a WITH element in scope: one
    visible where it stands (its SELECT, or the UNION of a first SELECT), defined before it or
    read from a later SELECT of that UNION, and not the element it sits in (a name inside its
    own definition is the table of that name, not itself)."""
    name = nodes[index].words[1] if len(nodes[index].words) > 1 else ""
    if not ctes or "." in name:
        return False
    above = _ancestors(nodes, index)
    for cte_name, element, scope in ctes:
        if cte_name != name or element in above or scope not in above:
            continue
        if element < index or _owner(nodes, element) not in above:
            return True
    return False


def _setting_names(plain: str) -> list[str]:
    """The names of every SETTINGS clause of a canonical text whose strings are blanked."""
    names = []
    for clause in SETTINGS_CLAUSE.finditer(plain):
        position = clause.end()
        while True:
            match = SETTING_NAME.match(plain, position)
            if not match:
                break
            names.append(match.group(1))
            depth, position = 0, match.end()
            while position < len(plain):  # skip the value: up to a comma outside brackets
                char = plain[position]
                if char in "([{":
                    depth += 1
                elif char in ")]}":
                    depth -= 1
                elif depth <= 0 and char in ",\n":
                    break
                position += 1
            if position >= len(plain) or plain[position] != ",":
                break
            position += 1
    return names


def _kind_name(kind: str) -> str:
    return {"Set": "SET", "UseQuery": "USE", "SYSTEM": "SYSTEM", "KillQueryQuery": "KILL", "Explain": "EXPLAIN"}.get(
        kind, kind.removesuffix("Query").upper())


def _fixed(name: str) -> GatewayError:
    return refusal(SETTING_CONSTRAINT_VIOLATION, "SETTING_CONSTRAINT_VIOLATION",
                   f"setting {name[:64]} is fixed by the gpubill gateway", 403)


def _unknown_table(name: str) -> GatewayError:
    return refusal(UNKNOWN_TABLE, "UNKNOWN_TABLE", f"Table {name[:128]} does not exist: the gpubill gateway serves "
                   "the project's tables and views and some system tables (a WITH name AS (subquery) is not read "
                   "as a table: write the subquery in FROM)", 404)


def _denied(reason: str) -> GatewayError:
    return refusal(ACCESS_DENIED, "ACCESS_DENIED", f"the gpubill gateway refuses this statement: {reason}", 403)
