//! Checking delta frames (pack index 2) against their bases, as every read decodes them:
//! `verify` takes each delta frame of the packs it checks, `repair` each of the packs it
//! indexed once the new catalog locates every base. A frame that fails is one line naming its
//! pack, its chunk, its bases and what failed.

use crate::error::{ErrorKind, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::store::Store;

/// One delta frame of a pack, as its pack's index describes it.
#[derive(Debug, Clone)]
pub(crate) struct DeltaFrame {
    /// Where it is.
    pub(crate) location: crate::pack::FrameLocation,
    /// Its bases, in prefix order, as its pack's index lists them.
    pub(crate) bases: Vec<ObjectId>,
    /// The chunks it holds: id, offset and length in its raw bytes.
    pub(crate) chunks: Vec<(ObjectId, u32, u32)>,
}

impl DeltaFrame {
    /// Frame number `frame` of pack `pack`, whose index is `index`.
    pub(crate) fn of(pack: &ObjectId, index: &crate::pack::PackIndex, frame: u32) -> Self {
        let record = &index.frames[frame as usize];
        DeltaFrame {
            location: crate::pack::FrameLocation {
                pack: *pack,
                offset: record.offset,
                stored_length: record.stored_length,
                raw_length: record.raw_length,
                compression: record.compression,
            },
            bases: index.bases_of(frame).to_vec(),
            chunks: index
                .objects
                .iter()
                .filter(|o| o.frame == frame)
                .map(|o| (o.id, o.offset, o.length))
                .collect(),
        }
    }
}

/// Decodes delta frames against their bases, as every read does, with the store's catalog
/// locating the bases: used by `verify` and by `repair` once it has rebuilt the catalog.
pub(crate) struct DeltaCheck<'s> {
    store: &'s Store,
    packs: crate::pack::PackReader,
}

/// The bases of one delta frame as its pack's index lists them (the frame being checked),
/// every other frame's and every base's place as the catalog has them.
struct IndexFirst<'a> {
    frame: &'a DeltaFrame,
    catalog: &'a crate::catalog::Catalog,
}

impl crate::pack::BaseLookup for IndexFirst<'_> {
    fn bases(&self, frame: &crate::pack::FrameLocation) -> Result<Vec<ObjectId>> {
        if *frame == self.frame.location {
            Ok(self.frame.bases.clone())
        } else {
            crate::pack::BaseLookup::bases(self.catalog, frame)
        }
    }

    fn locate_base(&self, id: &ObjectId) -> Result<(crate::pack::FrameLocation, u32, u32)> {
        self.catalog.locate_base(id)
    }
}

impl<'s> DeltaCheck<'s> {
    /// A check of `store`'s delta frames.
    pub(crate) fn new(store: &'s Store) -> Self {
        DeltaCheck {
            store,
            packs: crate::pack::PackReader::new(&store.packs_dir(), 4),
        }
    }

    /// Checks delta frame `frame`: each base is in the store, its bases' chains do not lead
    /// back to it and are at most `MAX_DELTA_DEPTH` deep, the catalog lists the bases its
    /// pack's index lists, and it decodes against them (each base read and checked against
    /// its id, the window capped) to chunks that hash to their ids. `Ok(Err(problem))`: one
    /// line naming the pack, the chunk, the bases and what failed.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub(crate) fn check(&mut self, frame: &DeltaFrame) -> Result<std::result::Result<(), String>> {
        let catalog = self.store.catalog();
        let chunk = frame
            .chunks
            .first()
            .map_or_else(|| "no chunk".to_string(), |c| format!("chunk {}", c.0));
        let what = format!(
            "pack {}: {chunk} (a delta frame at offset {})",
            frame.location.pack, frame.location.offset
        );
        let list = |ids: &[ObjectId]| {
            ids.iter()
                .map(ObjectId::to_hex)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut missing = Vec::new();
        for base in &frame.bases {
            if !catalog.has_object(base, ObjectKind::Chunk)? {
                missing.push(*base);
            }
        }
        match missing.as_slice() {
            [] => {}
            [base] => return Ok(Err(format!("{what}: its base {base} is not in the store"))),
            _ => {
                return Ok(Err(format!(
                    "{what}: its bases {} are not in the store",
                    list(&missing)
                )));
            }
        }
        let closure = match catalog.delta_bases_of(&frame.bases) {
            Ok(closure) => closure,
            Err(e) if e.kind() == ErrorKind::Corrupt => {
                return Ok(Err(format!("{what}: {e}")));
            }
            Err(e) => return Err(e),
        };
        if frame
            .chunks
            .iter()
            .any(|(id, _, _)| frame.bases.contains(id) || closure.binary_search(id).is_ok())
        {
            return Ok(Err(format!(
                "{what}: its bases ({}) lead back to it: a cycle of deltas",
                list(&frame.bases)
            )));
        }
        let catalogued = catalog.frame_bases(&frame.location)?;
        if !catalogued.is_empty() && catalogued != frame.bases {
            return Ok(Err(format!(
                "{what}: the catalog lists the bases {}, its pack's index {}: run `dsv repair`",
                list(&catalogued),
                list(&frame.bases)
            )));
        }
        let lookup = IndexFirst { frame, catalog };
        if let Err(e) = self.packs.prepare(&frame.location, &lookup) {
            return Ok(Err(format!(
                "{what}, against its bases {}: {e}",
                list(&frame.bases)
            )));
        }
        for (id, offset, length) in &frame.chunks {
            if let Err(e) =
                self.packs
                    .with_object(&frame.location, *offset, *length, id, true, |_| ())
            {
                return Ok(Err(format!(
                    "{what}, against its bases {}: {e}",
                    list(&frame.bases)
                )));
            }
        }
        Ok(Ok(()))
    }
}
