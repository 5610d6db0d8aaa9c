"""What the gateway serves: the allow-lists its SQL guard checks ClickHouse's parse against.

Everything not named here is refused, whatever it is called: a table function, a scalar
function, a setting, a format, a system table or a kind of statement that a chDB upgrade
adds is refused until someone adds it here on purpose. The lists are what gpubill's own
statements use (its migrations, the pipeline, reports, retention, archives, clickhouse-
connect's handshake) and what a finance analyst's read-only SQL needs (arithmetic, dates,
strings, conditionals, aggregates). The product's statements run through a real gateway
in tests (the schema's migrations in tests/unit/test_gateway_security.py, the audit's and
the pipeline's shapes in tests/unit/test_gateway_boundaries.py, the workers, invoicing,
archives and finance's documented queries in their gateway tests), so a statement that
needs something new fails a test, not a customer.

Why each list is safe:
- SCALAR_FUNCTIONS compute on their arguments; none opens a file, a URL, a dictionary or a
  model (``file``, ``url``, ``dictGet``, ``catboostEvaluate``, ``getSetting``-like reads of
  server state beyond the harmless ones are not here);
- aggregate functions (``system.functions`` ``is_aggregate``, with their combinators)
  compute over rows; a name that is also in IO_FUNCTIONS is left out;
- TABLE_FUNCTIONS generate rows from their arguments (``view``'s inner query is checked like
  any other part of the statement); ``format`` (whose AvroConfluent reader fetches a schema
  registry URL), ``merge`` (any database's tables by regular expression) and every reader of
  files, URLs and other servers are not;
- SETTINGS change how a statement runs or writes its answer, never a limit, readonly, a file
  or a URL; the reader may set none but the ones clickhouse-connect sends by itself, and
  HARMLESS_SETTING_VALUES with those values only (what the JDBC driver sends);
- FORMATS need no schema file and fetch nothing (no Avro, Protobuf, CapnProto, Template).
"""

from __future__ import annotations

# ------------------------------------------------------------------------- statements

# the kind of statement (EXPLAIN AST's first node) each user may run
READ_STATEMENTS = frozenset({"SelectWithUnionQuery", "DescribeQuery", "ShowTables", "ExistsTableQuery",
                             "ShowCreateTableQuery"})
WRITE_STATEMENTS = READ_STATEMENTS | {"InsertQuery", "CreateQuery", "AlterQuery", "DropQuery", "OptimizeQuery",
                                      "Rename", "TruncateQuery", "DeleteQuery"}
# statements that change which tables exist (the guard re-reads the list after them)
DDL_STATEMENTS = frozenset({"CreateQuery", "DropQuery", "Rename"})

# every node EXPLAIN AST may show in a statement the gateway serves; anything else (a
# dictionary, a materialized view's targets, a new syntax) is refused
AST_NODES = frozenset({
    "SelectWithUnionQuery", "SelectIntersectExceptQuery", "SelectQuery", "ExpressionList", "Asterisk",
    "QualifiedAsterisk", "ColumnsRegexpMatcher", "ColumnsListMatcher", "QualifiedColumnsRegexpMatcher",
    "QualifiedColumnsListMatcher", "ColumnsTransformerList", "ColumnsExceptTransformer", "ColumnsApplyTransformer",
    "ColumnsReplaceTransformer", "Replacement", "TablesInSelectQuery", "TablesInSelectQueryElement",
    "TableExpression", "TableIdentifier", "TableJoin", "ArrayJoin", "Identifier", "Function", "Literal",
    "Subquery", "WithElement", "OrderByElement", "WindowDefinition", "WindowListElement", "SampleRatio",
    "QueryParameter", "Set", "InterpolateElement", "Interpolate", "DataType", "EnumDataType", "NameTypePair",
    "ObjectTypeArgument", "TupleDataType",
    # the writer's statements
    "InsertQuery", "CreateQuery", "Columns", "ColumnDeclaration", "Storage", "Index", "Constraint",
    "Projection", "ProjectionSelectQuery", "TTLElement", "AlterQuery", "AlterCommand", "Assignment",
    "Partition", "DropQuery", "OptimizeQuery", "Rename", "TruncateQuery", "DeleteQuery",
    # the reader's metadata statements
    "DescribeQuery", "ShowTables", "ExistsTableQuery", "ShowCreateTableQuery",
})

# system tables a user may read (metadata the product and clickhouse-connect look up)
SYSTEM_TABLES = frozenset({"one", "numbers", "tables", "columns", "parts", "settings", "functions", "databases",
                           "mutations", "merges", "data_type_families", "time_zones", "formats",
                           "aggregate_function_combinators", "table_engines", "table_functions",
                           "database_engines"})

TABLE_FUNCTIONS = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "values", "null", "view",
                             "generate_series", "generateSeries"})
# the table functions ClickHouse also knows in any case (the JDBC driver writes VALUES(…))
TABLE_FUNCTIONS_ANY_CASE = frozenset({"values", "view"})

# MergeTree engines (any *MergeTree) and these; never File, URL, S3, Kafka, MySQL, …, nor an
# engine that reads another table (Buffer, Merge, Distributed, Dictionary, MaterializedView):
# its arguments name tables the guard never sees as tables (Buffer(system, processes, …)
# served system.processes). The product creates MergeTree and Memory tables only.
ENGINES = frozenset({"Memory", "Log", "TinyLog", "StripeLog", "Null", "Set", "Join"})

# functions whose right operand, when a bare name, is read as a table (`x IN name`)
IN_FUNCTIONS = frozenset({"in", "notIn", "globalIn", "globalNotIn", "nullIn", "notNullIn", "globalNullIn",
                          "globalNotNullIn"})

# columns the read-only user never reads (the server's finance user has them revoked too:
# deploy/clickhouse/finance-user.xml); a statement that names their table may not use `*`
READER_HIDDEN_COLUMNS = {"api_keys": frozenset({"secret_sha256"})}
ALL_COLUMNS_NODES = frozenset({"Asterisk", "QualifiedAsterisk", "ColumnsRegexpMatcher", "ColumnsListMatcher",
                               "QualifiedColumnsRegexpMatcher", "QualifiedColumnsListMatcher"})

# ------------------------------------------------------------------------- functions

OPERATORS = frozenset({
    "plus", "minus", "multiply", "divide", "intDiv", "intDivOrZero", "modulo", "moduloOrZero", "negate",
    "equals", "notEquals", "less", "greater", "lessOrEquals", "greaterOrEquals", "and", "or", "not", "xor",
    "in", "notIn", "globalIn", "globalNotIn", "nullIn", "notNullIn", "like", "notLike", "ilike", "notILike",
    "isNull", "isNotNull", "isNullable", "isZeroOrNull", "if", "multiIf", "CAST", "_CAST", "accurateCast",
    "accurateCastOrNull", "accurateCastOrDefault", "tuple", "tupleElement", "array", "arrayElement", "map",
    "lambda", "coalesce", "ifNull", "nullIf", "assumeNotNull", "toNullable", "materialize", "identity",
    "ignore", "exists", "caseWithExpression", "transform", "grouping",
})

MATH_FUNCTIONS = frozenset({
    "abs", "sign", "round", "roundBankers", "roundDown", "roundToExp2", "floor", "ceil", "ceiling", "trunc",
    "truncate", "sqrt", "cbrt", "exp", "exp2", "exp10", "ln", "log", "log2", "log10", "log1p", "pow", "power",
    "greatest", "least", "gcd", "lcm", "max2", "min2", "pi", "e", "isFinite", "isInfinite", "isNaN",
    "bitAnd", "bitOr", "bitXor", "bitNot", "bitShiftLeft", "bitShiftRight", "widthBucket", "positiveModulo",
    "pmod",
})

CONVERSION_FUNCTIONS = frozenset({
    f"to{kind}{suffix}"
    for kind in ("Int8", "Int16", "Int32", "Int64", "Int128", "Int256", "UInt8", "UInt16", "UInt32", "UInt64",
                 "UInt128", "UInt256", "Float32", "Float64", "Date", "Date32", "DateTime", "DateTime64", "String",
                 "UUID", "Bool", "Decimal32", "Decimal64", "Decimal128", "Decimal256")
    for suffix in ("", "OrZero", "OrNull", "OrDefault")
} | {
    "toFixedString", "toStringCutToZero", "toDecimalString", "toTypeName", "toColumnTypeName", "toLowCardinality",
    "reinterpretAsString", "parseDateTimeBestEffort", "parseDateTimeBestEffortOrNull",
    "parseDateTimeBestEffortOrZero", "parseDateTime64BestEffort", "parseDateTime64BestEffortOrNull",
    "parseDateTime", "parseDateTimeOrNull", "toUnixTimestamp", "toUnixTimestamp64Milli", "toUnixTimestamp64Micro",
    "toUnixTimestamp64Nano", "fromUnixTimestamp", "fromUnixTimestamp64Milli", "fromUnixTimestamp64Micro",
    "fromUnixTimestamp64Nano", "toInterval", "toIntervalSecond", "toIntervalMinute", "toIntervalHour",
    "toIntervalDay", "toIntervalWeek", "toIntervalMonth", "toIntervalQuarter", "toIntervalYear",
    "toIntervalMillisecond", "toIntervalMicrosecond", "toIntervalNanosecond",
})

DATE_FUNCTIONS = frozenset({
    "now", "now64", "today", "yesterday", "timezone", "timeZone", "toTimeZone", "toTimezone", "timezoneOf",
    "timeZoneOf", "timeZoneOffset", "toYear", "toQuarter", "toMonth", "toDayOfMonth", "toDayOfWeek",
    "toDayOfYear", "toHour", "toMinute", "toSecond", "toISOWeek", "toISOYear", "toWeek", "toYearWeek",
    "toStartOfYear", "toStartOfQuarter", "toStartOfMonth", "toStartOfWeek", "toMonday", "toStartOfDay",
    "toStartOfHour", "toStartOfMinute", "toStartOfSecond", "toStartOfFiveMinutes", "toStartOfFiveMinute",
    "toStartOfTenMinutes", "toStartOfFifteenMinutes", "toStartOfInterval", "toLastDayOfMonth", "toTime",
    "toYYYYMM", "toYYYYMMDD", "toYYYYMMDDhhmmss", "toRelativeYearNum", "toRelativeMonthNum",
    "toRelativeDayNum", "toRelativeHourNum", "toRelativeMinuteNum", "toRelativeSecondNum", "dateDiff",
    "date_diff", "age", "dateAdd", "date_add", "dateSub", "date_sub", "addSeconds", "addMinutes", "addHours",
    "addDays", "addWeeks", "addMonths", "addQuarters", "addYears", "subtractSeconds", "subtractMinutes",
    "subtractHours", "subtractDays", "subtractWeeks", "subtractMonths", "subtractQuarters", "subtractYears",
    "timeSlot", "timeSlots", "formatDateTime", "formatDateTimeInJodaSyntax", "dateName", "monthName",
    "makeDate", "makeDate32", "makeDateTime", "makeDateTime64", "toDateTimeOrNull", "date_trunc", "dateTrunc",
    "year", "quarter", "month", "day", "hour", "minute", "second", "dayofmonth", "dayofweek", "dayofyear",
    "DATE", "timestamp", "toStartOfMillisecond", "toStartOfMicrosecond", "toStartOfNanosecond",
})

STRING_FUNCTIONS = frozenset({
    "length", "lengthUTF8", "char_length", "empty", "notEmpty", "lower", "upper", "lowerUTF8", "upperUTF8",
    "concat", "concatWithSeparator", "substring", "substr", "substringUTF8", "left", "right", "leftUTF8",
    "rightUTF8", "trim", "trimLeft", "trimRight", "trimBoth", "ltrim", "rtrim", "leftPad", "rightPad", "lpad",
    "rpad", "repeat", "reverse", "reverseUTF8", "replace", "replaceOne", "replaceAll", "replaceRegexpOne",
    "replaceRegexpAll", "position", "positionCaseInsensitive", "positionUTF8", "locate", "startsWith",
    "endsWith", "match", "extract", "extractAll", "splitByChar", "splitByString", "splitByRegexp",
    "arrayStringConcat", "format", "toValidUTF8", "translate", "translateUTF8", "hex", "unhex", "base64Encode",
    "base64Decode", "ascii", "countSubstrings", "multiSearchAny", "regexpExtract", "initcap", "initcapUTF8",
    "formatReadableSize", "formatReadableQuantity", "formatReadableDecimalSize", "formatReadableTimeDelta",
    "formatRow", "formatRowNoNewline", "leftPadUTF8", "rightPadUTF8", "normalizeUTF8NFC", "isValidUTF8",
    "formatQuery", "formatQuerySingleLine",
})

HASH_FUNCTIONS = frozenset({
    "cityHash64", "sipHash64", "sipHash128", "intHash32", "intHash64", "xxHash32", "xxHash64", "xxh3",
    "farmHash64", "murmurHash3_64", "MD5", "SHA1", "SHA224", "SHA256", "SHA512", "crc32", "CRC32",
    "halfMD5", "generateUUIDv4", "generateUUIDv7", "rand", "rand64", "randCanonical",
})

ARRAY_FUNCTIONS = frozenset({
    "arrayJoin", "arrayZip", "arrayMap", "arrayFilter", "arrayExists", "arrayAll", "arrayCount", "arraySum",
    "arrayMin", "arrayMax", "arrayAvg", "arraySort", "arrayReverseSort", "arrayDistinct", "arrayUniq",
    "arrayConcat", "arraySlice", "arrayPushBack", "arrayPushFront", "arrayPopBack", "arrayPopFront",
    "arrayReverse", "arrayFlatten", "arrayCompact", "arrayEnumerate", "arrayFirst", "arrayLast",
    "arrayFirstIndex", "arrayCumSum", "arrayDifference", "arrayReduce", "arrayIntersect", "arrayResize",
    "arrayWithConstant", "arrayStringConcat", "has", "hasAll", "hasAny", "indexOf", "countEqual", "range",
    "emptyArrayString", "emptyArrayUInt64", "length", "mapKeys", "mapValues", "mapContains", "tupleNames",
    "untuple", "splitByWhitespace", "groupArrayElement",
})

# what the database tells about itself (never another user's queries, never files)
INFO_FUNCTIONS = frozenset({"version", "currentDatabase", "database", "currentUser", "user",
                            "uptime", "getSetting", "toTypeName", "isConstant", "blockSize", "rowNumberInBlock",
                            "rowNumberInAllBlocks", "throwIf"})

# column codecs, index types and engines' arguments appear as functions in CREATE TABLE
DDL_FUNCTIONS = frozenset({"CODEC", "ZSTD", "LZ4", "LZ4HC", "Delta", "DoubleDelta", "Gorilla", "T64", "NONE",
                           "minmax", "set", "bloom_filter", "tokenbf_v1", "ngrambf_v1"})

SCALAR_FUNCTIONS = (OPERATORS | MATH_FUNCTIONS | CONVERSION_FUNCTIONS | DATE_FUNCTIONS | STRING_FUNCTIONS
                    | HASH_FUNCTIONS | ARRAY_FUNCTIONS | INFO_FUNCTIONS | DDL_FUNCTIONS)

# names an allow-list must never hold: they reach files, URLs, dictionaries, models or
# other servers (the start-up self-check holds the lists to this)
IO_FUNCTIONS = frozenset({"file", "url", "s3", "s3Cluster", "hdfs", "remote", "remoteSecure", "cluster",
                          "clusterAllReplicas", "mysql", "postgresql", "sqlite", "mongodb", "redis", "jdbc",
                          "odbc", "input", "executable", "azureBlobStorage", "iceberg", "deltaLake", "hudi",
                          "dictGet", "dictGetOrDefault", "dictHas", "joinGet", "catboostEvaluate",
                          "modelEvaluate", "disk", "loop", "fuzzJSON", "urlCluster",
                          "filesystem", "s3queue", "icebergS3", "gcs", "oss", "cosn", "hdfsCluster",
                          "getServerSetting", "getMergeTreeSetting", "initialQueryID", "queryID", "hostName"})
# as table functions, these two reach further than their scalar namesakes (see above)
IO_TABLE_FUNCTIONS = IO_FUNCTIONS | {"format", "merge"}

# ------------------------------------------------------------------------- settings

# clickhouse-connect sends these by itself (its handshake and every query)
TRANSPORT_SETTINGS = frozenset({"database_replicated_enforce_synchronous_settings", "date_time_input_format",
                                "output_format_json_quote_64bit_integers", "output_format_json_quote_denormals",
                                "output_format_arrow_string_as_string", "output_format_arrow_low_cardinality_as_dictionary",
                                "date_time_output_format", "output_format_native_write_json_as_string",
                                "input_format_binary_read_json_as_string", "output_format_binary_write_json_as_string",
                                "allow_experimental_json_type", "enable_json_type", "allow_experimental_dynamic_type",
                                "allow_experimental_variant_type", "output_format_native_encode_types_in_binary_format",
                                "input_format_native_decode_types_in_binary_format",
                                "input_format_null_as_default", "insert_null_as_default",
                                "cast_string_to_dynamic_use_inference"})
# what gpubill's own statements set (optimize_on_insert, insert_deduplication_token, the block sizes:
# the sink; join_use_nulls: rollups and the audit; mutations_sync: retention and tests; the Parquet
# codec: archives), and harmless knobs of a statement's own work
WRITER_SETTINGS = TRANSPORT_SETTINGS | {"optimize_on_insert", "join_use_nulls", "mutations_sync", "alter_sync",
                                        "output_format_parquet_compression_method", "max_threads",
                                        "insert_deduplicate", "insert_deduplication_token", "final", "async_insert",
                                        "wait_for_async_insert",
                                        "max_block_size", "max_insert_block_size", "min_insert_block_size_rows",
                                        "min_insert_block_size_bytes", "use_query_cache", "lightweight_deletes_sync",
                                        "select_sequential_consistency"}
READER_SETTINGS = TRANSPORT_SETTINGS
# settings a client may send (URL parameters, form fields) with these values only, which
# are ClickHouse's defaults or change nothing the gateway guards: the JDBC driver's v1 mode
# sends extremes=0 with every query
HARMLESS_SETTING_VALUES = {"extremes": frozenset({"0"})}

# table-level settings of CREATE TABLE … ENGINE = *MergeTree SETTINGS (never `disk`)
STORAGE_SETTINGS = frozenset({"index_granularity", "index_granularity_bytes", "min_bytes_for_wide_part",
                              "ttl_only_drop_parts", "merge_with_ttl_timeout", "allow_nullable_key",
                              "merge_selector_base", "non_replicated_deduplication_window"})

# ------------------------------------------------------------------------- formats

OUTPUT_FORMATS = frozenset({
    "TabSeparated", "TabSeparatedRaw", "TabSeparatedWithNames", "TabSeparatedWithNamesAndTypes",
    "TabSeparatedRawWithNames", "TabSeparatedRawWithNamesAndTypes", "TSV", "TSVRaw", "TSVWithNames",
    "TSVWithNamesAndTypes", "TSVRawWithNames", "TSVRawWithNamesAndTypes", "CSV", "CSVWithNames",
    "CSVWithNamesAndTypes", "JSON", "JSONCompact", "JSONEachRow", "JSONCompactEachRow", "JSONStringsEachRow",
    "JSONCompactEachRowWithNames", "JSONCompactEachRowWithNamesAndTypes", "JSONCompactStringsEachRow",
    "JSONLines", "NDJSON", "JSONL", "JSONColumns", "JSONCompactColumns", "JSONStrings", "JSONCompactStrings",
    "JSONObjectEachRow", "Native", "RowBinary", "RowBinaryWithNames", "RowBinaryWithNamesAndTypes", "Parquet",
    "Arrow", "ArrowStream", "ORC", "Pretty", "PrettyCompact", "PrettyCompactMonoBlock", "PrettyNoEscapes",
    "PrettySpace", "PrettyCompactNoEscapes", "PrettySpaceNoEscapes", "Vertical", "Markdown", "XML", "Values",
    "Null", "LineAsString", "Raw", "RawWithNames", "RawWithNamesAndTypes", "TSKV",
})
INPUT_FORMATS = frozenset({
    "Native", "RowBinary", "RowBinaryWithNames", "RowBinaryWithNamesAndTypes", "RowBinaryWithDefaults",
    "TabSeparated", "TabSeparatedRaw", "TabSeparatedWithNames", "TabSeparatedWithNamesAndTypes", "TSV",
    "TSVRaw", "TSVWithNames", "TSVWithNamesAndTypes", "CSV", "CSVWithNames", "CSVWithNamesAndTypes",
    "JSONEachRow", "JSONCompactEachRow", "JSONLines", "NDJSON", "JSONL", "Values", "Parquet", "Arrow",
    "ArrowStream", "LineAsString",
})
