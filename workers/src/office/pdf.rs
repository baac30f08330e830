//! PDF text (read-only) with lopdf: page count, page-range text, page-group maps.

use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::guard;
use super::package::read_failed;

/// Pages per group in a PDF map.
pub(crate) const PAGES_PER_GROUP: u32 = 10;
/// The most pages one read returns.
pub(crate) const MAX_READ_PAGES: u32 = 50;
/// Largest decompressed content stream per page.
const MAX_PAGE_CONTENT: usize = 64 * 1024 * 1024;

/// An opened PDF.
pub(crate) struct Pdf {
    document: lopdf::Document,
    pages: u32,
}

impl Pdf {
    pub(crate) fn open(bytes: &[u8]) -> Result<Pdf, ErrorBody> {
        if !bytes.starts_with(b"%PDF") {
            return Err(read_failed("this file is not a PDF (no %PDF header)"));
        }
        let document = guard(|| lopdf::Document::load_mem(bytes))?.map_err(|e| {
            read_failed(format!(
                "cannot read the PDF (damaged, truncated or password-protected): {e}"
            ))
        })?;
        if document.is_encrypted() {
            return Err(read_failed(
                "the PDF is password-protected; remove the password and add it again",
            ));
        }
        let pages = u32::try_from(document.get_pages().len()).unwrap_or(u32::MAX);
        Ok(Pdf { document, pages })
    }

    pub(crate) fn info(&self) -> Value {
        json!({"page_count": self.pages})
    }

    pub(crate) fn map(&self) -> Value {
        let groups: Vec<Value> = (0..self.pages.div_ceil(PAGES_PER_GROUP))
            .map(|i| {
                let first = i * PAGES_PER_GROUP + 1;
                let last = ((i + 1) * PAGES_PER_GROUP).min(self.pages);
                json!({"index": i, "pages": format!("{first}-{last}")})
            })
            .collect();
        json!({"page_count": self.pages, "page_groups": groups})
    }

    /// Text of `pages` (`"1-5"`, `"3"`, `"1,3,5-7"`; default the first group), page by page.
    pub(crate) fn read(&self, pages: Option<&str>) -> Result<Value, ErrorBody> {
        let default = format!("1-{}", self.pages.clamp(1, PAGES_PER_GROUP));
        let selected = parse_pages(pages.unwrap_or(&default), self.pages)?;
        let mut out = Vec::new();
        for page in &selected {
            let text = guard(|| {
                self.document
                    .extract_text_with_limit(&[*page], MAX_PAGE_CONTENT)
            })?
            .map_err(|e| read_failed(format!("cannot extract the text of page {page}: {e}")))?;
            out.push(json!({"page": page, "text": text.trim_end()}));
        }
        let last = selected.last().copied().unwrap_or(0);
        Ok(json!({"page_count": self.pages, "pages": out, "has_more": last < self.pages}))
    }
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// Parses a 1-based page selection against `total` pages.
pub(crate) fn parse_pages(text: &str, total: u32) -> Result<Vec<u32>, ErrorBody> {
    let mut pages = Vec::new();
    for piece in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = piece.split_once('-').unwrap_or((piece, piece));
        let parse = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| invalid(format!("pages {text:?} must look like 1-5 or 1,3,5-7")))
        };
        let (first, last) = (parse(first)?, parse(last)?);
        if first == 0 || first > last || last > total {
            return Err(invalid(format!("pages {piece:?} are outside 1-{total}")));
        }
        pages.extend(first..=last);
    }
    pages.sort_unstable();
    pages.dedup();
    if pages.is_empty() {
        return Err(invalid(format!("pages {text:?} selects no page")));
    }
    if pages.len() > MAX_READ_PAGES as usize {
        return Err(invalid(format!(
            "{} pages requested; read at most {MAX_READ_PAGES} per call",
            pages.len()
        )));
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_page_selections() {
        assert_eq!(parse_pages("1-3, 5", 9).unwrap(), vec![1, 2, 3, 5]);
        assert_eq!(parse_pages("2", 2).unwrap(), vec![2]);
        for bad in ["0", "3-1", "10", "x", ""] {
            assert_eq!(
                parse_pages(bad, 9).unwrap_err().code,
                ErrorCode::ValidationFailed,
                "{bad}"
            );
        }
    }

    #[test]
    fn refuses_what_is_not_a_pdf() {
        assert_eq!(
            Pdf::open(b"hello").err().map(|e| e.code),
            Some(ErrorCode::FileReadFailed)
        );
        assert_eq!(
            Pdf::open(b"%PDF-1.7\n1 0 obj").err().map(|e| e.code),
            Some(ErrorCode::FileReadFailed)
        );
    }
}
