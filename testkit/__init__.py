"""What the tests and the benchmarks both use: the local Confluence REST API
(`confluence_api`), the tiny BGE-M3-shaped model (`tiny_model`), store and chunk helpers
(`index_helpers`) and the paths of the carried corpus (`corpus`). Not installed with the
product: it is read from a checkout, as `tests/` and `bench/` are."""
