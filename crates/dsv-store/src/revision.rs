//! Revisions: how users name versions.
//!
//! ```text
//! NAME               the dataset's head (same as NAME@latest)
//! NAME@latest        the head (NAME@HEAD too)
//! NAME@TAG           a tag
//! NAME@<hex prefix>  a version of NAME whose id starts with the prefix (4+ digits)
//! NAME@BASE~N        the N-th parent of BASE (any of the above)
//! NAME@BASE^         its parent (git's HEAD^); `~` alone, `^1` and chains (`~2^`) too
//! ```
//! A tag wins over an id prefix spelled the same way.

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::id::{ObjectId, is_hex_prefix};

pub use crate::names::check_name;

/// The shortest id prefix accepted, in hex digits.
pub const MIN_PREFIX: usize = 4;

/// A parsed revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// The dataset name.
    pub dataset: String,
    /// `latest`, a tag, or an id prefix.
    pub base: String,
    /// How many parents to walk back.
    pub ancestors: u32,
}

impl Revision {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`Error::InvalidRevision`] or [`Error::InvalidName`].
    pub fn parse(text: &str) -> Result<Revision> {
        let invalid = |reason: &str| Error::InvalidRevision {
            revision: text.to_string(),
            reason: reason.to_string(),
        };
        // Names hold neither '~' nor '^': the first of them starts the ancestry suffix.
        let (rest, suffix) = text.split_at(text.find(['~', '^']).unwrap_or(text.len()));
        let ancestors = parse_ancestry(suffix).map_err(|reason| invalid(&reason))?;
        let (dataset, base) = match rest.split_once('@') {
            // git's name for the checked-out commit: here, the head.
            Some((dataset, "HEAD")) => (dataset, "latest"),
            Some((dataset, base)) => (dataset, base),
            None => (rest, "latest"),
        };
        // `mnist:v1` (the separator of `REV:PATH` where a revision is meant).
        if let Some((name, tag)) = dataset.split_once(':')
            && check_name("dataset", name).is_ok()
            && !tag.is_empty()
            && !tag.contains('/')
        {
            return Err(invalid(&format!(
                "did you mean {name}@{tag}? A revision is NAME@TAG; ':' separates a revision from a path (REV:PATH, in `ls` and `cat`)"
            )));
        }
        check_name("dataset", dataset)?;
        if base.is_empty() {
            return Err(invalid(&format!("nothing after '@'; {FORMS}")));
        }
        // Every tag and id prefix is a valid tag name: anything else (`@{1}`, `v1@x`, `v1..v2`)
        // is a form dsv does not have.
        if base != "latest" && check_name("tag", base).is_err() {
            return Err(invalid(&format!(
                "{base:?} is not a tag, an id prefix or latest; {FORMS}"
            )));
        }
        Ok(Revision {
            dataset: dataset.to_string(),
            base: base.to_string(),
            ancestors,
        })
    }

    /// Finds the version this revision names.
    ///
    /// # Errors
    /// [`Error::DatasetNotFound`], [`Error::RevisionNotFound`] (also when `~N` walks past the
    /// first version), [`Error::AmbiguousRevision`].
    pub fn resolve(&self, catalog: &Catalog) -> Result<ObjectId> {
        let text = self.to_string();
        let not_found = || Error::RevisionNotFound {
            revision: text.clone(),
            closest: None,
        };
        // A tag that is not there: a typo of one that is (`v1` for `v01`) is named.
        let unknown_tag = || -> Error {
            match catalog.closest_tag(&self.dataset, &self.base) {
                Ok(Some(tag)) => Error::RevisionNotFound {
                    revision: text.clone(),
                    closest: Some(
                        Revision {
                            base: tag,
                            ..self.clone()
                        }
                        .to_string(),
                    ),
                },
                Ok(None) => not_found(),
                Err(error) => error,
            }
        };
        let head = catalog.head(&self.dataset)?;
        let mut id = if self.base == "latest" {
            head.ok_or_else(not_found)?
        } else if let Some(id) = catalog.tag(&self.dataset, &self.base)? {
            id
        } else if is_hex_prefix(&self.base) && self.base.len() < MIN_PREFIX {
            return Err(Error::InvalidRevision {
                revision: text,
                reason: format!(
                    "an id prefix needs at least {MIN_PREFIX} hex digits (`dsv log {}` shows the ids)",
                    self.dataset
                ),
            });
        } else if is_hex_prefix(&self.base) && self.base.len() >= MIN_PREFIX {
            let matches = catalog.versions_with_prefix(&self.dataset, &self.base)?;
            match matches.as_slice() {
                [] => return Err(unknown_tag()),
                [one] => *one,
                many => {
                    return Err(Error::AmbiguousRevision {
                        revision: text,
                        candidates: many.iter().map(|id| id.short()).collect(),
                    });
                }
            }
        } else {
            return Err(unknown_tag());
        };
        for _ in 0..self.ancestors {
            let version = catalog.version(&id)?.ok_or_else(not_found)?;
            id = version.version.parent.ok_or_else(not_found)?;
        }
        Ok(id)
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.dataset, self.base)?;
        if self.ancestors > 0 {
            write!(f, "~{}", self.ancestors)?;
        }
        Ok(())
    }
}

/// The revision forms, for the messages of a revision that does not parse.
const FORMS: &str = "a revision is NAME (its latest version), NAME@TAG, NAME@latest (or NAME@HEAD), \
     NAME@<id prefix, 4+ hex digits>, any of these followed by ~N (N versions back), ~ or ^ \
     (one back, as git's HEAD~N, HEAD~ and HEAD^): mnist@v2~1, mnist@HEAD^";

/// The number of versions back that an ancestry suffix walks: a sequence of `~N` (`N`
/// parents, a decimal number), `~` and `^` (one parent each), `^1` (one: the first parent)
/// and `^0` (none), as git reads them; `""` is 0.
///
/// # Errors
/// What is wrong, for [`Error::InvalidRevision`]: anything else in the suffix, `^N` with
/// `N > 1` (a merge's other parents: a dsv version has one parent), or a total over
/// `u32::MAX`.
fn parse_ancestry(mut suffix: &str) -> std::result::Result<u32, String> {
    let mut total: u32 = 0;
    while let Some(step) = suffix.chars().next() {
        suffix = &suffix[step.len_utf8()..];
        let digits = suffix
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(suffix.len());
        let (number, after) = suffix.split_at(digits);
        suffix = after;
        let count: u32 = if number.is_empty() {
            1
        } else {
            number
                .parse()
                .map_err(|_| format!("{number} versions back is too many"))?
        };
        let back = match step {
            '~' => count,
            '^' if count <= 1 => count,
            '^' => {
                return Err(format!(
                    "^{count} names a merge's parent number {count}, and a dsv version has one parent (^ or ~1 is it)"
                ));
            }
            _ => {
                return Err(format!(
                    "{step:?} after the ancestry suffix: '~' and '^' are followed by a number or another '~' or '^'; {FORMS}"
                ));
            }
        };
        total = total
            .checked_add(back)
            .ok_or_else(|| "too many versions back".to_string())?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_form_parses_back() {
        // Found by fuzz/fuzz_targets/fuzz_revision.rs: a '~' inside the base was accepted
        // ("mnist@a~4b~0" parsed with base "a~4b"), and its shown form did not parse.
        assert!(Revision::parse("mnist@a~4b~0").is_err());
        for text in ["mnist", "mnist@v1~3", "mnist@ab12~0", "mnist@v1~2^~0"] {
            let revision = Revision::parse(text).unwrap();
            assert_eq!(Revision::parse(&revision.to_string()).unwrap(), revision);
        }
    }

    #[test]
    fn parses_every_form() {
        let r = |s: &str| Revision::parse(s).unwrap();
        assert_eq!(
            r("mnist"),
            Revision {
                dataset: "mnist".into(),
                base: "latest".into(),
                ancestors: 0
            }
        );
        assert_eq!(r("mnist@v1").base, "v1");
        assert_eq!(r("mnist@HEAD"), r("mnist@latest"));
        assert_eq!(r("mnist@HEAD~2"), r("mnist@latest~2"));
        let hint = Revision::parse("mnist:v1").unwrap_err().to_string();
        assert!(hint.contains("did you mean mnist@v1?"), "{hint}");
        assert_eq!(r("mnist@latest~2").ancestors, 2);
        assert_eq!(r("mnist~1").ancestors, 1);
        assert_eq!(r("mnist@ab12cd").base, "ab12cd");
        for bad in [
            "",
            "@v1",
            "mn ist",
            "mnist@",
            "mnist@v1~x",
            "../x",
            "mnist@v1~+2",
            "a@b@c~1",
        ] {
            assert!(Revision::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn accepts_gits_ancestry_suffixes() {
        let r = |s: &str| Revision::parse(s).unwrap();
        assert_eq!(r("mnist@HEAD^"), r("mnist@latest~1"));
        assert_eq!(r("mnist@HEAD^^"), r("mnist@latest~2"));
        assert_eq!(r("mnist@HEAD~"), r("mnist@latest~1"));
        assert_eq!(r("mnist@HEAD~3"), r("mnist@latest~3"));
        assert_eq!(r("mnist@HEAD~2^"), r("mnist@latest~3"));
        assert_eq!(r("mnist@v1^1"), r("mnist@v1~1"));
        assert_eq!(r("mnist@v1^0"), r("mnist@v1"));
        assert_eq!(r("mnist@v1~2~0"), r("mnist@v1~2"));
        assert_eq!(r("mnist^"), r("mnist~1"));
        let merge = Revision::parse("mnist@HEAD^2").unwrap_err().to_string();
        assert!(merge.contains("one parent"), "{merge}");
        // A form dsv does not have says which forms there are.
        for unknown in ["mnist@{1}", "mnist@HEAD@{2}", "mnist@v1^{tree}"] {
            let message = Revision::parse(unknown).unwrap_err().to_string();
            assert!(message.contains("NAME@TAG"), "{unknown}: {message}");
            assert!(message.contains("HEAD^"), "{unknown}: {message}");
        }
    }
}
