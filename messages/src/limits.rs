//! Limits every entry point applies, the same for JSON and MessagePack, so that whatever is
//! accepted can be stored and read back (sled records are JSON, whose reader stops at 128
//! levels) and listed (list views carry no message bodies).
//!
//! - [`MAX_DEPTH`]: nesting of arrays and maps in any payload, checked on the bytes before
//!   anything is decoded ([`check_depth`]).
//! - [`MAX_MESSAGE_BYTES`]: a job's message.
//! - [`LISTED_MESSAGE_CHARS`]: how much of a message a list of jobs shows.

use crate::{ErrorBody, ErrorCode, Format};

/// Deepest nesting of arrays and maps a payload may have (a tool's arguments, a workflow, a
/// batch definition): far beyond any real document operation, well within every reader.
pub const MAX_DEPTH: usize = 64;

/// Largest job message, in bytes (a pasted page of text fits; files go into the workbench).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Characters of a job's message a listing carries (`atelier jobs`, `/api/jobs`); the job's own
/// view carries it whole.
pub const LISTED_MESSAGE_CHARS: usize = 200;

fn too_deep(format: Format) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "the {} payload nests arrays and maps more than {MAX_DEPTH} levels deep",
            match format {
                Format::Json => "JSON",
                Format::MessagePack => "MessagePack",
            }
        ),
    )
}

/// Refuses a payload nested deeper than [`MAX_DEPTH`]. A malformed or truncated payload passes
/// here and is refused by the decoder with its own reason.
pub fn check_depth(bytes: &[u8], format: Format) -> Result<(), ErrorBody> {
    let deepest = match format {
        Format::Json => json_depth(bytes),
        Format::MessagePack => msgpack_depth(bytes),
    };
    match deepest > MAX_DEPTH {
        true => Err(too_deep(format)),
        false => Ok(()),
    }
}

/// The deepest nesting of `[` and `{` outside strings (stops counting past the limit).
fn json_depth(bytes: &[u8]) -> usize {
    let mut deepest = 0;
    for (_, _, depth) in json_nesting(bytes) {
        deepest = deepest.max(depth);
        if deepest > MAX_DEPTH {
            break;
        }
    }
    deepest
}

/// Each byte of `json` with the nesting of `[` and `{` outside strings before it and after it.
pub fn json_nesting(json: &[u8]) -> impl Iterator<Item = (u8, usize, usize)> + '_ {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    json.iter().map(move |&byte| {
        let before = depth;
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        (byte, before, depth)
    })
}

/// The deepest nesting of arrays and maps of one MessagePack value (stops counting past the
/// limit, and at the end of a truncated payload).
fn msgpack_depth(bytes: &[u8]) -> usize {
    let mut reader = Reader { bytes, at: 0 };
    // Values still to read at each open level; the bottom one is the payload itself.
    let mut pending: Vec<u64> = vec![1];
    let mut deepest = 0;
    while let Some(left) = pending.last_mut() {
        if *left == 0 {
            pending.pop();
            continue;
        }
        *left -= 1;
        let Some(children) = reader.value() else {
            break;
        };
        if children > 0 {
            pending.push(children);
            deepest = deepest.max(pending.len() - 1);
            if deepest > MAX_DEPTH {
                break;
            }
        }
    }
    deepest
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    /// Reads one value's head and skips its own bytes; returns how many values it contains
    /// (array items, map keys and values), `None` at the end or on an unknown marker.
    fn value(&mut self) -> Option<u64> {
        let marker = self.byte()?;
        let contained = match marker {
            0x80..=0x8f => u64::from(marker & 0x0f) * 2,
            0x90..=0x9f => u64::from(marker & 0x0f),
            0xdc => self.number(2)?,
            0xdd => self.number(4)?,
            0xde => self.number(2)? * 2,
            0xdf => self.number(4)? * 2,
            _ => {
                let skip = self.payload_len(marker)?;
                self.at = self.at.checked_add(usize::try_from(skip).ok()?)?;
                0
            }
        };
        Some(contained)
    }

    /// The bytes after the marker of a value that holds no other values.
    fn payload_len(&mut self, marker: u8) -> Option<u64> {
        Some(match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
            0xa0..=0xbf => u64::from(marker & 0x1f),
            0xc4 | 0xd9 => self.number(1)?,
            0xc5 | 0xda => self.number(2)?,
            0xc6 | 0xdb => self.number(4)?,
            0xc7 => self.number(1)? + 1,
            0xc8 => self.number(2)? + 1,
            0xc9 => self.number(4)? + 1,
            0xcc | 0xd0 => 1,
            0xcd | 0xd1 => 2,
            0xca | 0xce | 0xd2 => 4,
            0xcb | 0xcf | 0xd3 => 8,
            0xd4 => 2,
            0xd5 => 3,
            0xd6 => 5,
            0xd7 => 9,
            0xd8 => 17,
            _ => return None,
        })
    }

    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    /// A big-endian unsigned number of `width` bytes.
    fn number(&mut self, width: usize) -> Option<u64> {
        let end = self.at.checked_add(width)?;
        let digits = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(digits.iter().fold(0, |n, &b| (n << 8) | u64::from(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    fn encoded(value: &Value, format: Format) -> Vec<u8> {
        crate::encode(value, format).unwrap_or_default()
    }

    #[test]
    fn both_formats_take_the_limit_and_refuse_one_level_more() {
        for format in [Format::Json, Format::MessagePack] {
            let at_limit = json!({"args": nested(MAX_DEPTH - 1), "s": "[[[[{{{{"});
            assert_eq!(check_depth(&encoded(&at_limit, format), format), Ok(()));
            let over = json!({"args": nested(MAX_DEPTH)});
            let error = check_depth(&encoded(&over, format), format).expect_err("too deep");
            assert_eq!(error.code, ErrorCode::ValidationFailed);
        }
    }

    #[test]
    fn a_thousand_levels_of_maps_are_refused_and_blobs_are_skipped_not_read() {
        let deep = (0..1000).fold(json!(null), |inner, _| json!({"x": inner}));
        for format in [Format::Json, Format::MessagePack] {
            assert!(check_depth(&encoded(&deep, format), format).is_err());
        }
        // A binary payload whose bytes look like array markers is one flat value.
        let blob = serde_bytes::ByteBuf::from(vec![0x91u8; 100_000]);
        let bytes = rmp_serde::to_vec_named(&json!({})).unwrap_or_default();
        assert_eq!(check_depth(&bytes, Format::MessagePack), Ok(()));
        let packed = rmp_serde::to_vec(&(1u8, blob)).unwrap_or_default();
        assert_eq!(check_depth(&packed, Format::MessagePack), Ok(()));
    }

    #[test]
    fn truncated_and_garbage_payloads_are_left_to_the_decoder() {
        assert_eq!(check_depth(&[0xdd, 0xff], Format::MessagePack), Ok(()));
        assert_eq!(check_depth(&[0xc1, 0x00], Format::MessagePack), Ok(()));
        assert_eq!(check_depth(b"\"unterminated [[[[", Format::Json), Ok(()));
    }
}
