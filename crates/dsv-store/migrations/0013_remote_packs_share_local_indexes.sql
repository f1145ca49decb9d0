-- Schema 13: a remote pack that is a local pack (the same pack id and size: push uploads
-- local packs whole under their own name, and a pack's name is the BLAKE3 of its bytes)
-- shares that pack's index in `packs`, `frames` and `objects` instead of a copy of it in
-- `remote_frames` and `remote_objects` (a copy doubled the catalog after a push).
-- `local_index` 1: the remote pack's objects are those `objects` locates in the local pack
-- of the same id, plus any rows of its own in `remote_objects` (objects of the pack whose
-- `objects` row names another local pack). When the local pack is dropped (gc), its rows
-- are first copied into `remote_frames` and `remote_objects` and the flag cleared.
ALTER TABLE remote_packs ADD COLUMN local_index INTEGER NOT NULL DEFAULT 0;

UPDATE remote_packs SET local_index = 1
 WHERE EXISTS (SELECT 1 FROM packs p WHERE p.pack_id = remote_packs.pack_id AND p.size = remote_packs.size);

-- The copies a shared index makes redundant: rows whose object `objects` locates in the
-- local pack of the same id. Rows for objects located in another local pack stay.
DELETE FROM remote_objects WHERE EXISTS (
    SELECT 1 FROM remote_frames rf
      JOIN remote_packs rp ON rp.id = rf.pack AND rp.local_index = 1
      JOIN packs p ON p.pack_id = rp.pack_id
      JOIN objects o ON o.id = remote_objects.id AND o.kind = remote_objects.kind
      JOIN frames f ON f.id = o.frame AND f.pack = p.id
     WHERE rf.id = remote_objects.frame);

DELETE FROM remote_frames
 WHERE pack IN (SELECT id FROM remote_packs WHERE local_index = 1)
   AND NOT EXISTS (SELECT 1 FROM remote_objects o WHERE o.frame = remote_frames.id);
