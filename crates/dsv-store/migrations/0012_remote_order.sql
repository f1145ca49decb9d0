-- Schema 12: the remotes' read order. Reads that fetch data a store lacks (checkout, pull,
-- mount, the Python package) ask the remotes in this order, 1 first, and fall back to the
-- next on a miss or a failure. `dsv remote add` appends a remote last (`--first`: first);
-- `dsv remote order` changes it. Positions are dense (1..n). Remotes recorded before this
-- schema were read in name order, so they keep that order.
ALTER TABLE remotes ADD COLUMN position INTEGER NOT NULL DEFAULT 0;
UPDATE remotes SET position = (SELECT count(*) FROM remotes AS r WHERE r.name <= remotes.name);
