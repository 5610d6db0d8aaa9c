"""What SQL the gateway lets reach the engine, for every user, and the settings it forces.

Refused for everyone (ACCESS_DENIED, 497, HTTP 403): `SYSTEM …`, `KILL`, `BACKUP`/`RESTORE`,
`ATTACH`/`DETACH`, `… FROM INFILE`, `… INTO OUTFILE`, dictionaries (their sources reach files
and the network), table functions other than the harmless ones in SAFE_TABLE_FUNCTIONS
(so file, url, s3, remote, cluster, mysql, input, executable, … and `INSERT INTO FUNCTION`),
the scalar `file()` and `disk()` functions, table and database engines other than
SAFE_ENGINES (File, URL, S3, Kafka, MySQL, …), and any change of a PROTECTED_SETTINGS
setting (the gateway's limits, readonly, schema and template files) by URL parameter,
form field, SETTINGS clause or SET.

How, so that comments, casing, escapes and nesting do not matter — ClickHouse's own parser
decides, on the engine, before the statement runs:

1. the raw text (`check_text`): no `;` but a trailing one (chDB runs every statement of a
   multi-statement text, and its splitter is not the parser's: inline INSERT data may end
   where the parser saw none), and no INFILE/OUTFILE keyword (EXPLAIN AST shows their file
   as a bare literal; a keyword cannot be split or escaped, so a word search is exact);
2. `EXPLAIN AST <sql>` (`inspect`): refuses what cannot be parsed, then every node at any
   depth — subqueries, WITH, view(), merge() arguments, CREATE … AS SELECT included;
3. `formatQuery(<sql>)` (`inspect`): the canonical text, in which setting names are
   written plainly (`read\\x6fnly` becomes readonly) and engines as `ENGINE = Name`.

The pipeline's inserts (`INSERT INTO t (cols) FORMAT Native` + data) skip 2 and 3: the
`PLAIN_INSERT` pattern accepts only plain identifiers and a format name, nothing that can
name a function, a file or a setting (a regex match, microseconds). Their data cannot carry
expressions either: every statement runs with input_format_values_interpret_expressions=0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpubill.devenv.gateway.request import GatewayError, refusal

ACCESS_DENIED = 497
SETTING_CONSTRAINT_VIOLATION = 452
CANNOT_PARSE = 62  # SYNTAX_ERROR

SAFE_TABLE_FUNCTIONS = frozenset({
    "numbers", "numbers_mt", "zeros", "zeros_mt", "values", "null", "view", "merge", "format",
    "generate_series", "generateseries", "generaterandom",
})
DENIED_FUNCTIONS = frozenset({"file", "disk", "catboostevaluate", "modelevaluate"})  # scalar, with I/O
SAFE_ENGINES = frozenset({"Memory", "Log", "TinyLog", "StripeLog", "Null", "Set", "Join", "Buffer", "Merge",
                          "Atomic", "Ordinary", "GenerateRandom"})
# engines that older chDBs may not list in system.table_engines / database_engines
KNOWN_ENGINES = frozenset({"File", "URL", "S3", "HDFS", "MySQL", "PostgreSQL", "SQLite", "MongoDB", "Redis",
                           "Kafka", "RabbitMQ", "NATS", "FileLog", "Executable", "ExecutablePool", "Distributed",
                           "JDBC", "ODBC", "Filesystem", "MaterializedMySQL", "MaterializedPostgreSQL",
                           "Replicated", "Lazy", "Backup", "DataLakeCatalog", "AzureBlobStorage", "Iceberg",
                           "DeltaLake", "Hudi", "EmbeddedRocksDB", "KeeperMap", "Dictionary"})
DENIED_QUERIES = ("SYSTEM", "KillQueryQuery", "BackupQuery", "AttachQuery", "DetachQuery", "ExternalDDLQuery")
PROTECTED_SETTINGS = frozenset({
    # the gateway's limits and readonly: no client lifts them, not even the pipeline
    "readonly", "allow_ddl", "max_execution_time", "max_execution_time_leaf", "max_estimated_execution_time",
    "timeout_overflow_mode", "timeout_overflow_mode_leaf", "max_memory_usage", "max_memory_usage_for_user",
    "max_memory_usage_for_all_queries", "max_untracked_memory", "memory_overcommit_ratio_denominator",
    "memory_overcommit_ratio_denominator_for_user", "max_parser_depth", "max_parser_backtracks", "max_ast_depth",
    "max_ast_elements", "max_expanded_ast_elements",
    # settings that name files the server reads or writes
    "format_schema", "format_schema_source", "format_schema_message_name", "format_template_resultset",
    "format_template_row", "output_format_schema",
    # insert data must stay data (a Values row could call file())
    "input_format_values_interpret_expressions", "input_format_values_deduce_templates_of_expressions",
    # a MergeTree setting that creates a disk on any path or bucket
    "disk",
})

_IDENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[A-Za-z0-9_ .$-]+`)"
_TABLE = r"(?!(?:FUNCTION|TABLE)\b)" + _IDENT
PLAIN_INSERT = re.compile(
    rf"INSERT INTO (?:{_IDENT}\.)?{_TABLE} ?\({_IDENT}(?:, ?{_IDENT})*\) FORMAT [A-Za-z][A-Za-z0-9]*",
    re.ASCII | re.IGNORECASE)
FILE_KEYWORDS = re.compile(r"(?<![A-Za-z0-9_$])(INFILE|OUTFILE)(?![A-Za-z0-9_$])", re.IGNORECASE)
SETTINGS_KEYWORD = re.compile(r"\bSET(?:TINGS?)?\b")  # formatQuery writes keywords in capitals
ENGINE_CLAUSE = re.compile(r"\bENGINE\s*=\s*`?(\w+)")
AST_LINE = re.compile(r"^( *)([A-Za-z][^\n]*)$")


@dataclass(frozen=True)
class Limits:
    """What every statement runs under (the gateway's settings, forced after the client's)."""

    max_execution_s: int = 300
    max_memory_bytes: int = 4 << 30

    def forced_settings(self, readonly: int) -> dict[str, str]:
        """The settings the engine applies after the client's, in this order (readonly last,
        so that it cannot refuse the others). readonly: 0 read-write, 1 reader, 2 GET."""
        forced = {
            "max_execution_time": str(self.max_execution_s),
            "max_memory_usage": str(self.max_memory_bytes),
            "input_format_values_interpret_expressions": "0",
            "input_format_values_deduce_templates_of_expressions": "0",
        }
        if readonly:
            forced["readonly"] = str(readonly)
        return forced


class SqlGuard:
    """Decides, for every user alike, whether a statement may run (see the module docstring).

    `table_functions`, `engines` and `setting_aliases` come from the engine's own system
    tables at start-up (system.table_functions, system.table_engines, system.settings), so
    a chDB upgrade that adds a table function or an alias is covered without a code change."""

    def __init__(self, table_functions: set[str], engines: set[str], setting_aliases: dict[str, str]) -> None:
        self.denied_functions = frozenset({name.lower() for name in table_functions} - SAFE_TABLE_FUNCTIONS
                                          | DENIED_FUNCTIONS)
        self.engines = frozenset(engines | KNOWN_ENGINES)
        protected = set(PROTECTED_SETTINGS)
        protected.update(alias.lower() for alias, target in setting_aliases.items() if target.lower() in PROTECTED_SETTINGS)
        self.protected = frozenset(protected)
        self._protected_word = re.compile(r"(?<![A-Za-z0-9_$])(" + "|".join(sorted(map(re.escape, self.protected)))
                                          + r")(?![A-Za-z0-9_$])", re.IGNORECASE)

    def check_settings(self, settings: dict[str, str]) -> None:
        """Client settings (URL parameters, form fields) that the gateway fixes are refused."""
        for name in settings:
            if name.lower() in self.protected:
                raise refusal(SETTING_CONSTRAINT_VIOLATION, "SETTING_CONSTRAINT_VIOLATION",
                              f"setting {name} is fixed by the gpubill gateway", 403)

    @staticmethod
    def is_plain_insert(sql: str) -> bool:
        """True for `INSERT INTO [db.]t (cols) FORMAT x` with plain identifiers and nothing else."""
        return PLAIN_INSERT.fullmatch(sql) is not None

    @staticmethod
    def check_text(sql: str) -> None:
        """Step 1 (pure, before anything runs): one statement, no INFILE/OUTFILE."""
        if ";" in sql.rstrip().rstrip(";"):
            raise _denied("one statement per request: a ';' may only end it")
        keyword = FILE_KEYWORDS.search(sql)
        if keyword:
            raise _denied(f"{keyword.group(1).upper()} reaches files on the gateway's host")

    def inspect(self, formatted: str, ast: str) -> None:
        """Steps 2 and 3: `ast` is EXPLAIN AST's text, `formatted` formatQuery's."""
        uses_settings = SETTINGS_KEYWORD.search(formatted) is not None
        lines = ast.rstrip("\n").split("\n")
        nodes = []
        for line in lines:
            match = AST_LINE.match(line)
            if not match:
                raise refusal(CANNOT_PARSE, "SYNTAX_ERROR", "the gateway cannot inspect this statement (is a FORMAT "
                              "clause not at its end?)", 400)
            nodes.append((len(match.group(1)), match.group(2).split()))
        for index, (depth, words) in enumerate(nodes):
            label = words[0]
            if label in DENIED_QUERIES:
                raise _denied(f"{'SYSTEM' if label == 'SYSTEM' else label.removesuffix('Query').upper()} statements "
                              "are not served")
            if label == "Dictionary":
                raise _denied("dictionaries are not served (their sources reach files and the network)")
            if label in ("Function", "FunctionWithKeyValueArguments") and len(words) > 1 \
                    and words[1].lower() in self.denied_functions:
                raise _denied(f"{words[1]}() reaches files or the network")
            if words[:2] == ["Storage", "definition"]:
                self._check_engines(nodes, index, depth)
            uses_settings = uses_settings or label == "Set"
        for engine in ENGINE_CLAUSE.findall(formatted):
            self._check_engine(engine)
        if uses_settings:
            protected = self._protected_word.search(formatted)
            if protected:
                raise refusal(SETTING_CONSTRAINT_VIOLATION, "SETTING_CONSTRAINT_VIOLATION",
                              f"setting {protected.group(1)} is fixed by the gpubill gateway", 403)

    def _check_engines(self, nodes: list[tuple[int, list[str]]], index: int, depth: int) -> None:
        for child_depth, words in nodes[index + 1:]:
            if child_depth <= depth:
                return
            if child_depth == depth + 1 and words[0] == "Function" and len(words) > 1 and words[1] in self.engines:
                self._check_engine(words[1])

    @staticmethod
    def _check_engine(name: str) -> None:
        if name not in SAFE_ENGINES and not name.endswith("MergeTree"):
            raise _denied(f"ENGINE = {name} is not served (MergeTree engines and "
                          f"{', '.join(sorted(SAFE_ENGINES))} are)")


def _denied(reason: str) -> GatewayError:
    return refusal(ACCESS_DENIED, "ACCESS_DENIED", f"the gpubill gateway refuses this statement: {reason}", 403)
