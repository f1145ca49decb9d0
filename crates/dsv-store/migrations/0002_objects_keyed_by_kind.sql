-- Schema 2: objects are keyed by (id, kind). A chunk whose bytes happen to equal a tree's or
-- a version's encoding has the same BLAKE3 id; keyed by id alone, one would hide the other.
CREATE TABLE objects_by_kind (
    id      BLOB    NOT NULL,
    kind    INTEGER NOT NULL,            -- 1 chunk, 2 tree, 3 version, 4 file map
    frame   INTEGER NOT NULL REFERENCES frames(id),
    offset  INTEGER NOT NULL,            -- within the frame's raw bytes
    length  INTEGER NOT NULL,
    PRIMARY KEY (id, kind)
) WITHOUT ROWID;
INSERT INTO objects_by_kind (id, kind, frame, offset, length)
    SELECT id, kind, frame, offset, length FROM objects;
DROP TABLE objects;
ALTER TABLE objects_by_kind RENAME TO objects;
