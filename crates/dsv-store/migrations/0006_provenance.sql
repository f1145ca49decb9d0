-- Schema 6: imported versions name a provenance object (where each file came from), copied
-- from the version object like the other version fields. NULL for committed versions.
ALTER TABLE versions ADD COLUMN provenance BLOB;
