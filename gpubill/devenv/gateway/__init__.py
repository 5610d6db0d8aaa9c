"""The parts of `gpubill clickhouse serve` (gpubill/devenv/ch_gateway.py) that decide what a
request may do: who sent it (`auth`), what it asks for (`request`) and whether its SQL may
run (`sql_guard`). Pure functions and small classes; the HTTP server and the engine stay
in ch_gateway.py and warehouse/chdb_engine.py."""
