//! Any bytes, in either format, as every payload a peer can send: never a panic, always a result.
#![no_main]

use atelier_messages::job::{ApproveCall, JobEvent, JobSubmit, ListJobs};
use atelier_messages::store::{AddFiles, ListFiles, SetApprovals, WriteDraft};
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{Format, decode, decode_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for format in [Format::MessagePack, Format::Json] {
        let _ = decode::<JobSubmit>(data, format);
        let _ = decode::<ToolRequest>(data, format);
        let _ = decode::<WriteDraft>(data, format);
        let _ = decode::<AddFiles>(data, format);
        let _ = decode::<ListFiles>(data, format);
        let _ = decode::<ApproveCall>(data, format);
        let _ = decode::<SetApprovals>(data, format);
        let _ = decode::<ListJobs>(data, format);
        let _ = decode::<JobEvent>(data, format);
        let _ = decode_reply::<ToolOutput>(data, format);
    }
});
