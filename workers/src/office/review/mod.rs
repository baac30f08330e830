//! Content review: what changed inside a file between two versions, per format, with the
//! office readers (text and CSV lines, calamine sheets, docx blocks, pptx slides). Counts are
//! exact; samples and the unified text diff are bounded.
//!
//! - `sequence`: the one diff of unit sequences (lines, rows, paragraphs, slides).
//! - `sheets`: workbooks, cell by cell per sheet.
//! - `added`: what an added sheet holds, cut at the documented size.

mod added;
mod sequence;
mod sheets;

use atelier_messages::ErrorBody;
use atelier_messages::review::{Changes, ContentDiff};
use similar::{ChangeTag, TextDiff};

use super::docx::Docx;
use super::formats::Format;
use super::pptx::Pptx;
use super::text::{decode, sniff_delimiter, split_record};

/// The most bytes of a unified text diff.
pub(crate) const MAX_UNIFIED_BYTES: usize = 16 * 1024;

/// Compares two versions of `path` (`None`: the file does not exist on that side). A version
/// that cannot be read makes the whole diff `unavailable` with the reason.
pub(crate) fn diff(
    path: &str,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
    limit: usize,
) -> ContentDiff {
    let format = match Format::of(path) {
        Ok(format) => format,
        Err(error) => return unavailable(error),
    };
    let result = match format {
        Format::Text => Ok(text(old, new)),
        Format::Csv => Ok(table(old, new, limit)),
        Format::Xlsx | Format::SheetReadOnly => sheets::diff(path, old, new, limit),
        Format::Docx => document(old, new, limit),
        Format::Pptx => slides(old, new, limit),
        Format::Pdf | Format::Binary => Ok(ContentDiff::Binary {
            old_size: old.map_or(0, |b| b.len() as u64),
            new_size: new.map_or(0, |b| b.len() as u64),
        }),
    };
    result.unwrap_or_else(unavailable)
}

fn unavailable(error: ErrorBody) -> ContentDiff {
    ContentDiff::Unavailable {
        reason: error.to_string(),
    }
}

fn as_text(bytes: Option<&[u8]>) -> String {
    bytes.map(|b| decode(b).text).unwrap_or_default()
}

fn text(old: Option<&[u8]>, new: Option<&[u8]>) -> ContentDiff {
    let (old, new) = (as_text(old), as_text(new));
    let diff = TextDiff::configure()
        .deadline(std::time::Instant::now() + sequence::DEADLINE)
        .diff_lines(&old, &new);
    let (mut lines_added, mut lines_removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => lines_added += 1,
            ChangeTag::Delete => lines_removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let mut unified = diff.unified_diff().context_radius(3).to_string();
    let truncated = unified.len() > MAX_UNIFIED_BYTES;
    if truncated {
        let mut end = MAX_UNIFIED_BYTES;
        while !unified.is_char_boundary(end) {
            end -= 1;
        }
        unified.truncate(end);
    }
    ContentDiff::Text {
        unified,
        lines_added,
        lines_removed,
        truncated,
    }
}

/// A CSV as its header and rows (empty lines skipped), split with the sniffed delimiter.
fn records(bytes: Option<&[u8]>) -> (Vec<String>, Vec<Vec<String>>) {
    let text = as_text(bytes);
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let Some(header) = lines.next() else {
        return (Vec::new(), Vec::new());
    };
    let delimiter = sniff_delimiter(header);
    let rows = lines.map(|line| split_record(line, delimiter)).collect();
    (split_record(header, delimiter), rows)
}

fn table(old: Option<&[u8]>, new: Option<&[u8]>, limit: usize) -> ContentDiff {
    let (old_header, old_rows) = records(old);
    let (new_header, new_rows) = records(new);
    let missing_from = |header: &[String], other: &[String]| -> Vec<String> {
        header
            .iter()
            .filter(|c| !other.contains(c))
            .cloned()
            .collect()
    };
    ContentDiff::Table {
        columns_added: missing_from(&new_header, &old_header),
        columns_removed: missing_from(&old_header, &new_header),
        rows: sequence::diff(&old_rows, &new_rows, limit),
    }
}

fn paragraphs(bytes: Option<&[u8]>) -> Result<Vec<String>, ErrorBody> {
    let Some(bytes) = bytes else {
        return Ok(Vec::new());
    };
    let blocks = Docx::open(bytes.to_vec())?.blocks()?;
    Ok(blocks
        .iter()
        .flat_map(|block| block.review_lines())
        .collect())
}

fn document(
    old: Option<&[u8]>,
    new: Option<&[u8]>,
    limit: usize,
) -> Result<ContentDiff, ErrorBody> {
    let paragraphs = sequence::diff(&paragraphs(old)?, &paragraphs(new)?, limit);
    Ok(ContentDiff::Document { paragraphs })
}

fn slide_texts(bytes: Option<&[u8]>) -> Result<Vec<Vec<String>>, ErrorBody> {
    let Some(bytes) = bytes else {
        return Ok(Vec::new());
    };
    let mut deck = Pptx::open(bytes.to_vec())?;
    (0..deck.slides.len())
        .map(|index| deck.slide(index).map(|slide| slide.text_lines()))
        .collect()
}

fn slides(old: Option<&[u8]>, new: Option<&[u8]>, limit: usize) -> Result<ContentDiff, ErrorBody> {
    let slides: Changes<Vec<String>> =
        sequence::diff(&slide_texts(old)?, &slide_texts(new)?, limit);
    Ok(ContentDiff::Slides { slides })
}

#[cfg(test)]
mod tests;
