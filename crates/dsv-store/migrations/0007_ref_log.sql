-- Schema 7: the ref log (.dsv/reflog, see src/reflog.rs and docs/format.md), the durable
-- record of heads, tags, remotes, pins and removals that `dsv repair` replays when the catalog
-- is lost. `length` is how many bytes of it the catalog has applied; NULL until the first
-- open after this migration writes a snapshot of the catalog's state into it.
CREATE TABLE ref_log (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    length  INTEGER
);
INSERT INTO ref_log (id, length) VALUES (1, NULL);
