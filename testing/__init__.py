"""Support shared by the tests (`tests/`) and the benchmarks (`benches/`): real engines and
records (`engine`), what a block leaves held in memory (`memory`), spans made by the
OpenTelemetry SDK and kept in memory (`otlp_spans`), a real server process (`server_process`,
`serve_pml`, `line_process`), a throwaway PostgreSQL cluster (`postgres_cluster`), the flood and
expensive-tenant measurements (`flood_measure`, `cost_measure` and the load processes they
start, `flood`, `cost_load`) and the numpy reference of the lexical index
(`lexical_numpy_reference`, the oracle the Rust index is checked against) and hostile code
for the normalizer (`code_shapes`). Both suites import
this package; it imports neither, and it is not shipped in the wheel."""
