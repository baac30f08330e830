//! Reading a part's XML as calamine does, for the package pass ([`scan`](super::scan)) and its
//! ODS tables ([`ods`](super::ods)): its parser settings, its attribute readers, and why a pass
//! over a part ended early.

use std::io::{BufReader, Read};

use atelier_messages::ErrorBody;
use quick_xml::Reader;
use quick_xml::events::BytesStart;

use super::read_failed;

/// Why a part's pass ended early.
pub(super) enum Halt {
    /// The reader would fail here as well: the rest of the part is never read.
    Stop,
    /// The package is refused.
    Refuse(ErrorBody),
}

impl From<ErrorBody> for Halt {
    fn from(error: ErrorBody) -> Halt {
        Halt::Refuse(error)
    }
}

pub(super) type Step<T> = Result<T, Halt>;

/// An XML reader over a part with calamine's settings (lenient end names and comments, empty
/// elements as a start and an end).
pub(super) fn xml_reader<R: Read>(part: R) -> Reader<BufReader<R>> {
    let mut reader = Reader::from_reader(BufReader::new(part));
    let config = reader.config_mut();
    config.check_end_names = false;
    config.trim_text(false);
    config.check_comments = false;
    config.expand_empty_elements = true;
    reader
}

/// Visits an element's attributes in order (raw values, a repeated name kept, as calamine's
/// attribute reader sees them) until `visit` returns false. A malformed attribute refuses the
/// package: the readers would fail on it, or read it otherwise than this pass.
pub(super) fn each_attr(
    element: &BytesStart<'_>,
    mut visit: impl FnMut(&str, &str) -> bool,
) -> Step<()> {
    for attribute in element.attributes().with_checks(false) {
        let attribute = attribute.map_err(|e| {
            read_failed(format!(
                "the package is damaged: a malformed attribute in <{}> ({e})",
                element.name().as_ref()
            ))
        })?;
        if !visit(attribute.key.as_ref(), &attribute.value) {
            break;
        }
    }
    Ok(())
}

/// The first value of an attribute (calamine's `raw_attr`).
pub(super) fn raw_attr(element: &BytesStart<'_>, name: &str) -> Step<Option<String>> {
    let mut found = None;
    each_attr(element, |key, value| {
        if key == name {
            found = Some(value.to_string());
        }
        found.is_none()
    })?;
    Ok(found)
}

/// Attributes as calamine's `get_attrs!` reads them: one pass that ends once it has seen as
/// many of `names` as there are names (a repeated one counts each time), keeping the last
/// value of each.
pub(super) fn get_attrs<const N: usize>(
    element: &BytesStart<'_>,
    names: [&str; N],
) -> Step<[Option<String>; N]> {
    let mut values: [Option<String>; N] = std::array::from_fn(|_| None);
    let mut seen = 0;
    each_attr(element, |key, value| {
        if let Some(at) = names.iter().position(|name| *name == key) {
            values[at] = Some(value.to_string());
            seen += 1;
        }
        seen < N
    })?;
    Ok(values)
}

/// Every value of an attribute (a repeated one included), to check them all.
pub(super) fn all_attrs(element: &BytesStart<'_>, name: &str) -> Step<Vec<String>> {
    let mut values = Vec::new();
    each_attr(element, |key, value| {
        if key == name {
            values.push(value.to_string());
        }
        true
    })?;
    Ok(values)
}
