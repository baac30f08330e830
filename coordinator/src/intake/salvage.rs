//! Reading a submission from the job queue, and what a refused one still tells: its job id and
//! workbench (and the start of its message), so that the refusal is recorded as a failed job
//! like every other (docs/adr/0008) instead of vanishing.
//!
//! A submission nested deeper than the limit is never decoded as such: its top-level fields are
//! read from a copy in which every nested value is replaced by `null` (nil in MessagePack), found
//! without recursion, so no depth can exhaust the reader.

use atelier_messages::job::{JobSubmit, validate_job_id};
use atelier_messages::limits::LISTED_MESSAGE_CHARS;
use atelier_messages::{ErrorBody, Format, decode};
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::workbench::MAX_NAME_LEN;

/// What a message on the job queue is.
#[derive(Debug)]
pub(super) enum Submission {
    /// A submission to record.
    Valid(JobSubmit),
    /// A refused submission whose id and workbench could be read: what could be read of it
    /// ([`kept`]) and why it is refused.
    Refused(Box<JobSubmit>, ErrorBody),
    /// A refused submission whose job id or workbench cannot be read.
    Unreadable(ErrorBody),
}

/// Reads a submission: decoded and checked, or refused with what could be read of it.
pub(super) fn read(payload: &[u8], format: Format) -> Submission {
    let (readable, error) = match decode::<JobSubmit>(payload, format) {
        Ok(submit) => match submit.validate() {
            Ok(()) => return Submission::Valid(submit),
            Err(error) => (kept(&submit), error),
        },
        Err(error) => (top_level(payload, format), error),
    };
    match readable {
        Some(submit) => Submission::Refused(Box::new(submit), error),
        None => Submission::Unreadable(error),
    }
}

/// What a refused submission's record keeps: its id, workbench, batch and submission time and
/// the start of its message; `None` unless the id is valid and the workbench could be a name.
fn kept(submit: &JobSubmit) -> Option<JobSubmit> {
    validate_job_id(&submit.job_id).ok()?;
    let workbench_ok = !submit.workbench.is_empty() && submit.workbench.len() <= MAX_NAME_LEN;
    if !workbench_ok {
        return None;
    }
    let mut message: String = submit.message.chars().take(LISTED_MESSAGE_CHARS).collect();
    if message.len() < submit.message.len() {
        message.push('…');
    }
    let mut kept = JobSubmit::new(submit.job_id.clone(), submit.workbench.clone(), message);
    kept.submitted_at_ms = submit.submitted_at_ms;
    kept.batch_id = submit
        .batch_id
        .clone()
        .filter(|id| validate_job_id(id).is_ok());
    Some(kept)
}

/// A top-level field that may not have the expected type.
#[derive(Deserialize)]
#[serde(untagged)]
enum Field<T> {
    Value(T),
    Other(IgnoredAny),
}

impl<T> Field<T> {
    fn value(field: Option<Self>) -> Option<T> {
        match field {
            Some(Field::Value(value)) => Some(value),
            _ => None,
        }
    }
}

/// The top-level fields of a submission a refusal's record needs.
#[derive(Deserialize)]
struct TopLevel {
    job_id: String,
    workbench: String,
    #[serde(default)]
    message: Option<Field<String>>,
    #[serde(default)]
    submitted_at_ms: Option<Field<u64>>,
    #[serde(default)]
    batch_id: Option<Field<String>>,
}

/// The submission's top-level fields, its nested values left out.
fn top_level(payload: &[u8], format: Format) -> Option<JobSubmit> {
    let flat = match format {
        Format::Json => flat_json(payload),
        Format::MessagePack => flat_msgpack(payload)?,
    };
    let top: TopLevel = decode(&flat, format).ok()?;
    let mut submit = JobSubmit::new(
        top.job_id,
        top.workbench,
        Field::value(top.message).unwrap_or_default(),
    );
    submit.submitted_at_ms = Field::value(top.submitted_at_ms).unwrap_or(submit.submitted_at_ms);
    submit.batch_id = Field::value(top.batch_id);
    kept(&submit)
}

/// `json` with every array or object inside the top-level value replaced by `null`.
fn flat_json(json: &[u8]) -> Vec<u8> {
    let mut flat = Vec::with_capacity(json.len());
    for (byte, before, after) in atelier_messages::limits::json_nesting(json) {
        if before == 1 && after == 2 {
            flat.extend_from_slice(b"null");
        }
        if before < 2 && after < 2 {
            flat.push(byte);
        }
    }
    flat
}

/// `msgpack` (a map) with every value that is an array or a map replaced by nil; `None` when it
/// is not a map or ends early.
fn flat_msgpack(msgpack: &[u8]) -> Option<Vec<u8>> {
    let mut reader = Reader {
        bytes: msgpack,
        at: 0,
    };
    let entries = match reader.byte()? {
        marker @ 0x80..=0x8f => u64::from(marker & 0x0f),
        0xde => reader.number(2)?,
        0xdf => reader.number(4)?,
        _ => return None,
    };
    let mut flat = msgpack.get(..reader.at)?.to_vec();
    for _ in 0..entries {
        let key = reader.at;
        reader.skip_value()?;
        flat.extend_from_slice(msgpack.get(key..reader.at)?);
        let value = reader.at;
        let nested = matches!(
            msgpack.get(value)?,
            0x80..=0x9f | 0xdc..=0xdf
        );
        reader.skip_value()?;
        match nested {
            true => flat.push(0xc0),
            false => flat.extend_from_slice(msgpack.get(value..reader.at)?),
        }
    }
    Some(flat)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    /// A big-endian unsigned number of `width` bytes.
    fn number(&mut self, width: usize) -> Option<u64> {
        let bytes = self.bytes.get(self.at..self.at.checked_add(width)?)?;
        self.at += width;
        Some(bytes.iter().fold(0, |n, b| (n << 8) | u64::from(*b)))
    }

    fn skip(&mut self, count: u64) -> Option<()> {
        let end = self.at.checked_add(usize::try_from(count).ok()?)?;
        (end <= self.bytes.len()).then(|| self.at = end)
    }

    /// Skips one whole value, however deep, without recursion.
    fn skip_value(&mut self) -> Option<()> {
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            pending = pending.checked_add(self.head()?)?;
        }
        Some(())
    }

    /// Reads one value's head and skips its own bytes; returns how many values it contains
    /// (array items, map keys and values).
    fn head(&mut self) -> Option<u64> {
        let marker = self.byte()?;
        let (children, own) = match marker {
            0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (0, 0),
            0x80..=0x8f => (u64::from(marker & 0x0f) * 2, 0),
            0x90..=0x9f => (u64::from(marker & 0x0f), 0),
            0xa0..=0xbf => (0, u64::from(marker & 0x1f)),
            0xc4 | 0xd9 => (0, self.number(1)?),
            0xc5 | 0xda => (0, self.number(2)?),
            0xc6 | 0xdb => (0, self.number(4)?),
            0xc7 => (0, self.number(1)? + 1),
            0xc8 => (0, self.number(2)? + 1),
            0xc9 => (0, self.number(4)? + 1),
            0xca => (0, 4),
            0xcb => (0, 8),
            0xcc | 0xd0 => (0, 1),
            0xcd | 0xd1 => (0, 2),
            0xce | 0xd2 => (0, 4),
            0xcf | 0xd3 => (0, 8),
            0xd4 => (0, 2),
            0xd5 => (0, 3),
            0xd6 => (0, 5),
            0xd7 => (0, 9),
            0xd8 => (0, 17),
            0xdc => (self.number(2)?, 0),
            0xdd => (self.number(4)?, 0),
            0xde => (self.number(2)? * 2, 0),
            0xdf => (self.number(4)? * 2, 0),
            _ => return None,
        };
        self.skip(own)?;
        Some(children)
    }
}

#[cfg(test)]
mod tests {
    use atelier_messages::workflow::Workflow;
    use atelier_messages::{ErrorCode, encode};
    use serde_json::{Value, json};

    use super::*;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    fn deep_submission() -> JobSubmit {
        let mut submit = JobSubmit::new("deep-1".into(), "w".into(), "look \"[{\" up".into());
        submit.submitted_at_ms = 42;
        submit.workflow = Some(Workflow::single("list_files", json!({"x": nested(1000)})));
        submit
    }

    #[test]
    fn a_submission_nested_too_deep_is_refused_with_its_id_workbench_and_message() {
        for format in [Format::Json, Format::MessagePack] {
            let payload = encode(&deep_submission(), format).unwrap_or_default();
            let Submission::Refused(kept, error) = read(&payload, format) else {
                panic!("{format:?}: not refused with what could be read");
            };
            assert_eq!(error.code, ErrorCode::ValidationFailed);
            assert_eq!(
                (
                    kept.job_id.as_str(),
                    kept.workbench.as_str(),
                    kept.message.as_str()
                ),
                ("deep-1", "w", "look \"[{\" up")
            );
            assert_eq!((kept.submitted_at_ms, kept.workflow.is_none()), (42, true));
        }
    }

    #[test]
    fn a_message_over_the_limit_is_kept_cut() {
        let submit = JobSubmit::new("huge".into(), "w".into(), "x".repeat(300 * 1024));
        let payload = encode(&submit, Format::MessagePack).unwrap_or_default();
        let Submission::Refused(kept, error) = read(&payload, Format::MessagePack) else {
            panic!("not refused with what could be read");
        };
        assert_eq!(error.code, ErrorCode::ValidationFailed);
        assert_eq!(kept.message.chars().count(), LISTED_MESSAGE_CHARS + 1);
    }

    #[test]
    fn without_a_valid_job_id_or_workbench_a_submission_is_unreadable() {
        let cases: [&[u8]; 4] = [
            br#"{"v":1,"job_id":"bad id!","workbench":"w","message":"m","submitted_at_ms":0}"#,
            br#"{"v":1,"workbench":"w","deep":[[[[]]]]}"#,
            br#"{"v":1,"job_id":{"nested":1},"workbench":"w"}"#,
            b"[1, 2, 3]",
        ];
        for payload in cases {
            let read = read(payload, Format::Json);
            assert!(
                matches!(read, Submission::Unreadable(_)),
                "{}: {read:?}",
                String::from_utf8_lossy(payload)
            );
        }
        for payload in [&[0x81, 0xa1, b'v'][..], &[0xdf, 0xff, 0xff, 0xff, 0xff][..]] {
            assert!(matches!(
                read(payload, Format::MessagePack),
                Submission::Unreadable(_)
            ));
        }
    }

    #[test]
    fn nested_values_become_null_and_strings_are_kept_whole() {
        let flat = flat_json(br#"{"a": [1, {"b": "]"}], "s": "[x]", "n": 2, "o": {}}"#);
        assert_eq!(
            String::from_utf8_lossy(&flat),
            r#"{"a": null, "s": "[x]", "n": 2, "o": null}"#
        );
    }
}
