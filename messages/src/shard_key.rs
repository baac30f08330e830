//! The key a workbench's shard is computed from, and job ids that carry it: a leaf, so that
//! both [`shard`](crate::shard) and [`job`](crate::job) can use it.

/// FNV-1a, 32 bits.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2_166_136_261_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(16_777_619)
    })
}

/// The 32-bit key a workbench's shard is computed from (its shard among `count` is the key
/// modulo `count`).
pub fn shard_key(workbench: &str) -> u32 {
    fnv1a(workbench.as_bytes())
}

/// A job id for `workbench` made of `unique` (a UUID, say) and the workbench's
/// [`shard_key`]: `UNIQUE-wKKKKKKKK` (8 lower-case hex digits). A job verb naming it is asked of
/// that one shard instead of every shard; the coordinator refuses a submission whose id carries
/// another workbench's key.
pub fn job_id_for(unique: &str, workbench: &str) -> String {
    format!("{unique}-w{:08x}", shard_key(workbench))
}

/// The shard key a job id made by [`job_id_for`] carries.
pub fn carried_key(job_id: &str) -> Option<u32> {
    let at = job_id.len().checked_sub(10)?;
    let tail = job_id.get(at..)?.strip_prefix("-w")?;
    let lower_hex = tail
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if at == 0 || !lower_hex {
        return None;
    }
    u32::from_str_radix(tail, 16).ok()
}
