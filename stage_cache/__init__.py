"""The content-addressed cache every stage (fetch, normalize, chunk, embed) reads and
writes: `keys` says how an entry is addressed, `store` keeps entries on disk
(docs/architecture.md#the-stage-cache)."""
