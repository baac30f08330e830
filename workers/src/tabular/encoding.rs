//! Which text encoding a delimited file is in, and its transcoding to UTF-8 for DuckDB.
//!
//! Crates: `encoding_rs` (the WHATWG decoders Firefox uses: BOM sniffing, UTF-16, every
//! single-byte Windows/ISO code page, streaming decode with replacement) and `chardetng` (Firefox's
//! detector for legacy encodings, built on `encoding_rs`; small, no data files, deterministic).
//! Together they replace `charset-normalizer` from the design doc without a Python dependency.
//!
//! Order: a byte-order mark decides (UTF-8, UTF-16LE/BE, confidence 1.0); else a file that is
//! valid UTF-8 throughout is UTF-8 (1.0); else `chardetng` guesses a legacy encoding from the
//! first MiB. A guess it rates as beating the other candidates gets [`CONFIDENT_GUESS`], else
//! [`WEAK_GUESS`] (and the map carries a warning). Latin-1 files decode as `windows-1252`, its
//! superset (the WHATWG mapping of the `latin1` label).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use atelier_messages::{ErrorBody, ErrorCode};
use encoding_rs::{CoderResult, Encoding, UTF_8};

/// Bytes read per step when validating or transcoding.
const BLOCK: usize = 1 << 20;
/// Confidence of a legacy encoding `chardetng` rates above the other candidates.
pub(crate) const CONFIDENT_GUESS: f64 = 0.8;
/// Confidence of a legacy encoding `chardetng` could not separate from the others.
pub(crate) const WEAK_GUESS: f64 = 0.4;

/// A detected encoding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Detected {
    pub(crate) encoding: &'static Encoding,
    pub(crate) confidence: f64,
    /// Whether the file starts with a byte-order mark.
    pub(crate) bom: bool,
}

impl Detected {
    /// The name reported to the model, lower case (`utf-8`, `utf-16le`, `windows-1252`…).
    pub(crate) fn name(&self) -> String {
        self.encoding.name().to_ascii_lowercase()
    }

    /// Whether DuckDB can read the file as it is (UTF-8, with or without BOM).
    pub(crate) fn is_utf8(&self) -> bool {
        self.encoding == UTF_8
    }
}

fn read_failed(path: &Path, e: std::io::Error) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileReadFailed,
        format!("cannot read {}: {e}", path.display()),
    )
}

/// Detects the encoding of the file at `path`.
pub(crate) fn detect(path: &Path) -> Result<Detected, ErrorBody> {
    let mut file = File::open(path).map_err(|e| read_failed(path, e))?;
    let mut head = vec![0u8; BLOCK];
    let head_len = read_full(&mut file, &mut head).map_err(|e| read_failed(path, e))?;
    head.truncate(head_len);
    if let Some((encoding, _)) = Encoding::for_bom(&head) {
        return Ok(Detected {
            encoding,
            confidence: 1.0,
            bom: true,
        });
    }
    if is_utf8_stream(&head, &mut file).map_err(|e| read_failed(path, e))? {
        return Ok(Detected {
            encoding: UTF_8,
            confidence: 1.0,
            bom: false,
        });
    }
    Ok(guess_legacy(&head))
}

/// Detects the encoding of bytes in memory (tests and small samples).
#[cfg(test)]
pub(crate) fn detect_bytes(bytes: &[u8]) -> Detected {
    if let Some((encoding, _)) = Encoding::for_bom(bytes) {
        return Detected {
            encoding,
            confidence: 1.0,
            bom: true,
        };
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => Detected {
            encoding: UTF_8,
            confidence: 1.0,
            bom: false,
        },
        Err(_) => guess_legacy(bytes),
    }
}

/// `chardetng`'s guess; weak unless it beat the other candidates and decodes the sample without
/// errors or C1 control characters (the mark of a wrong single-byte guess).
fn guess_legacy(sample: &[u8]) -> Detected {
    let mut detector = chardetng::EncodingDetector::new();
    detector.feed(sample, true);
    let (encoding, assured) = detector.guess_assess(None, false);
    // A sample cut at BLOCK may end inside a multi-byte character.
    let whole = match sample.len() < BLOCK {
        true => sample,
        false => &sample[..sample.len() - 8],
    };
    let (text, had_errors) = encoding.decode_without_bom_handling(whole);
    let clean = !had_errors && !text.chars().any(|c| ('\u{80}'..='\u{9F}').contains(&c));
    Detected {
        encoding,
        confidence: if assured && clean {
            CONFIDENT_GUESS
        } else {
            WEAK_GUESS
        },
        bom: false,
    }
}

/// Reads until `buffer` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Whether `head` followed by the rest of `file` is valid UTF-8, one block at a time.
fn is_utf8_stream(head: &[u8], file: &mut File) -> std::io::Result<bool> {
    let mut carry: Vec<u8> = Vec::new();
    let mut block = head.to_vec();
    let mut next = vec![0u8; BLOCK];
    loop {
        carry.extend_from_slice(&block);
        match std::str::from_utf8(&carry) {
            Ok(_) => carry.clear(),
            // An incomplete sequence at the end may complete in the next block.
            Err(e) if e.error_len().is_none() => {
                let valid = e.valid_up_to();
                carry.drain(..valid);
            }
            Err(_) => return Ok(false),
        }
        let read = read_full(file, &mut next)?;
        if read == 0 {
            return Ok(carry.is_empty());
        }
        block = next[..read].to_vec();
    }
}

/// Writes the file at `source`, decoded from `detected`, as UTF-8 (no BOM) to `target`.
/// Undecodable bytes become U+FFFD; returns how many replacements were made.
pub(crate) fn transcode(
    source: &Path,
    detected: Detected,
    target: &Path,
) -> Result<u64, ErrorBody> {
    let mut input = File::open(source).map_err(|e| read_failed(source, e))?;
    let write_failed = |e: std::io::Error| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!(
                "cannot write the transcoded copy of {}: {e}",
                source.display()
            ),
        )
    };
    let mut output = BufWriter::new(File::create(target).map_err(write_failed)?);
    let mut decoder = detected.encoding.new_decoder_with_bom_removal();
    let mut buffer = vec![0u8; BLOCK];
    let mut text = String::with_capacity(BLOCK * 3 + 16);
    let mut replaced = 0u64;
    loop {
        let read = read_full(&mut input, &mut buffer).map_err(|e| read_failed(source, e))?;
        let last = read == 0;
        let mut consumed = 0;
        loop {
            text.clear();
            let (result, used, had_errors) =
                decoder.decode_to_string(&buffer[consumed..read], &mut text, last);
            consumed += used;
            if had_errors {
                replaced += text.matches('\u{FFFD}').count() as u64;
            }
            output.write_all(text.as_bytes()).map_err(write_failed)?;
            if result == CoderResult::InputEmpty {
                break;
            }
        }
        if last {
            break;
        }
    }
    output.flush().map_err(write_failed)?;
    Ok(replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boms_and_utf8_are_certain() {
        let utf8 = detect_bytes(b"a,b\n1,2\n");
        assert_eq!(
            (utf8.name(), utf8.confidence, utf8.bom),
            ("utf-8".into(), 1.0, false)
        );
        let bom = detect_bytes(b"\xEF\xBB\xBFa,b\n");
        assert_eq!((bom.name(), bom.bom), ("utf-8".into(), true));
        let utf16 = detect_bytes(b"\xFF\xFEa\x00,\x00b\x00");
        assert_eq!((utf16.name(), utf16.confidence), ("utf-16le".into(), 1.0));
        let utf16be = detect_bytes(b"\xFE\xFF\x00a");
        assert_eq!(utf16be.name(), "utf-16be");
    }

    #[test]
    fn western_european_text_is_windows_1252() {
        let text = "nombre;ciudad\nJosé;Málaga\nFrançois;Besançon\nJürgen;Zürich\nÅsa;Göteborg\n";
        let (bytes, _, _) = encoding_rs::WINDOWS_1252.encode(text);
        let detected = detect_bytes(&bytes);
        assert_eq!(detected.name(), "windows-1252");
        assert_eq!(detected.confidence, CONFIDENT_GUESS);
    }

    #[test]
    fn transcodes_utf16_and_windows_1252_to_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("in.csv");
        let target = dir.path().join("out.csv");
        std::fs::write(&source, b"\xFF\xFEa\x00,\x00\xE9\x00\n\x00").unwrap();
        let detected = detect(&source).unwrap();
        assert_eq!(transcode(&source, detected, &target).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "a,é\n");
        std::fs::write(&source, b"price\n\x8010\n").unwrap();
        let cp1252 = Detected {
            encoding: encoding_rs::WINDOWS_1252,
            confidence: CONFIDENT_GUESS,
            bom: false,
        };
        transcode(&source, cp1252, &target).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "price\n€10\n");
    }

    #[test]
    fn utf8_split_across_blocks_is_still_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.csv");
        let mut content = vec![b'a'; BLOCK - 1];
        content.extend_from_slice("é\n".as_bytes());
        std::fs::write(&path, &content).unwrap();
        assert_eq!(detect(&path).unwrap().name(), "utf-8");
        content.push(0xE9);
        std::fs::write(&path, &content).unwrap();
        assert_ne!(detect(&path).unwrap().name(), "utf-8");
    }
}
