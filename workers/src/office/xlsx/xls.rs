//! Legacy binary workbooks (`.xls`) measured before calamine reads them.
//!
//! calamine reads an xls file whole when it opens it: the OLE container's sector chains, then
//! every sheet of the `Workbook` stream into a dense range. This follows the same steps over
//! the same bytes and refuses, with `FILE_TOO_COMPLEX`, what would make them unbounded: a
//! sector chain that loops (calamine copies a looping chain until the length its directory
//! claims), more FAT sectors than the file has, a sheet whose `DIMENSIONS` or cells span more
//! than the sheet budget, sheets over the workbook budget, and sheets that overlap in the
//! stream (calamine reads each sheet's records from its offset to its end). A mini-stream
//! sector past the mini stream is refused as damaged. Where calamine would fail first, this
//! stops and lets it.

use atelier_messages::ErrorBody;

use crate::office::limits::{SHEET_CELLS, WORKBOOK_CELLS, too_complex};
use crate::office::package::read_failed;

const ENDOFCHAIN: u32 = 0xFFFF_FFFE;
const RESERVED_SECTORS: u32 = 0xFFFF_FFFA;
const DIFSECT: u32 = 0xFFFF_FFFC;
const MINI_SECTOR: usize = 64;
const MINI_CUTOFF: usize = 4096;

/// Why the measure ended early.
enum Halt {
    /// calamine fails here too (nothing more is read).
    Stop,
    Refuse(ErrorBody),
}

impl From<ErrorBody> for Halt {
    fn from(error: ErrorBody) -> Halt {
        Halt::Refuse(error)
    }
}

type Step<T> = Result<T, Halt>;

/// Checks an OLE file as calamine's xls reader will read it.
pub(crate) fn check(file: &[u8]) -> Result<(), ErrorBody> {
    match workbook_stream(file).and_then(|stream| sheets(&stream)) {
        Ok(()) | Err(Halt::Stop) => Ok(()),
        Err(Halt::Refuse(error)) => Err(error),
    }
}

fn u16_at(bytes: &[u8], at: usize) -> Step<u16> {
    let b = bytes.get(at..at + 2).ok_or(Halt::Stop)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Step<u32> {
    let b = bytes.get(at..at + 4).ok_or(Halt::Stop)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u32s(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The file's sectors as calamine addresses them: sector `n` follows the header.
struct Sectors<'a> {
    data: &'a [u8],
    size: usize,
    /// calamine's last valid sector id.
    maxid: u32,
}

impl<'a> Sectors<'a> {
    fn get(&self, id: u32) -> Step<&'a [u8]> {
        if id > self.maxid {
            return Err(Halt::Stop);
        }
        let start = id as usize * self.size;
        let end = (start + self.size).min(self.data.len());
        self.data.get(start..end).ok_or(Halt::Stop)
    }

    /// The bytes of a chain, at most `len`, as calamine's `get_chain` copies them; a chain that
    /// would copy more than the file holds loops.
    fn chain(&self, start: u32, fats: &[u32], len: usize, copy: bool) -> Step<Vec<u8>> {
        let mut out = Vec::new();
        let (mut id, mut copied, mut steps) = (start, 0usize, 0u64);
        while id != ENDOFCHAIN {
            steps += 1;
            if steps > u64::from(self.maxid) + 2 {
                return Err(too_complex(
                    "the xls file's sector chains loop (a chain visits a sector twice)",
                )
                .into());
            }
            let sector = self.get(id)?;
            let take = sector.len().min(len - copied);
            if copy {
                out.extend_from_slice(&sector[..take]);
            }
            copied += take;
            if copied >= len {
                break;
            }
            id = *fats.get(id as usize).ok_or(Halt::Stop)?;
        }
        Ok(out)
    }
}

/// The `Workbook` (or `Book`) stream, read as calamine reads it.
fn workbook_stream(file: &[u8]) -> Step<Vec<u8>> {
    let header = file.get(..512).ok_or(Halt::Stop)?;
    let size = match u16_at(header, 30)? {
        9 => 512,
        12 => 4096,
        _ => return Err(Halt::Stop),
    };
    if u16_at(header, 32)? != 6 || file.len() < size {
        return Err(Halt::Stop);
    }
    let sectors = Sectors {
        data: &file[size..],
        size,
        maxid: u32::try_from(file.len() / size).unwrap_or(u32::MAX),
    };
    let mini_fat_len = u32_at(header, 64)? as usize;
    let mut difat: Vec<u32> = u32s(&header[76..512]).collect();
    let mut id = u32_at(header, 68)?;
    let mut difat_sectors = 0u64;
    while id < RESERVED_SECTORS {
        difat_sectors += 1;
        if difat_sectors > u64::from(sectors.maxid) + 1 {
            return Err(Halt::Stop);
        }
        difat.extend(u32s(sectors.get(id)?));
        id = difat.pop().ok_or(Halt::Stop)?;
    }
    let fat_sectors: Vec<u32> = difat.into_iter().filter(|id| *id < DIFSECT).collect();
    if fat_sectors.len() as u64 > u64::from(sectors.maxid) + 1 {
        return Err(too_complex(format!(
            "the xls file lists {} FAT sectors in {} sectors",
            fat_sectors.len(),
            sectors.maxid
        ))
        .into());
    }
    let mut fats = Vec::new();
    for id in fat_sectors {
        fats.extend(u32s(sectors.get(id)?));
    }
    let directories = sectors.chain(u32_at(header, 48)?, &fats, usize::MAX, true)?;
    let entries: Vec<Directory> = directories
        .chunks_exact(128)
        .map(|entry| Directory::of(entry, size))
        .collect::<Step<_>>()?;
    let root = entries.first().ok_or(Halt::Stop)?;
    let (mini_fats, mini_stream) = if mini_fat_len > 0 {
        let stream = sectors.chain(root.start, &fats, root.len, true)?;
        let minifat = sectors.chain(
            u32_at(header, 60)?,
            &fats,
            mini_fat_len.saturating_mul(size),
            true,
        )?;
        (u32s(&minifat).collect::<Vec<u32>>(), stream)
    } else {
        (Vec::new(), Vec::new())
    };
    let wanted = ["Workbook", "Book"]
        .iter()
        .find_map(|name| entries.iter().find(|d| d.name.eq_ignore_ascii_case(name)))
        .ok_or(Halt::Stop)?;
    if wanted.len < MINI_CUTOFF {
        let mini = Sectors {
            data: &mini_stream,
            size: MINI_SECTOR,
            maxid: sectors.maxid.saturating_mul(8),
        };
        let mut out = Vec::new();
        let mut id = wanted.start;
        while id != ENDOFCHAIN && out.len() < wanted.len {
            let sector = mini.get(id)?;
            if sector.len() < MINI_SECTOR.min(wanted.len - out.len()) {
                return Err(read_failed(
                    "the xls file is damaged: its workbook stream points past its mini stream",
                )
                .into());
            }
            let take = sector.len().min(wanted.len - out.len());
            out.extend_from_slice(&sector[..take]);
            id = *mini_fats.get(id as usize).ok_or(Halt::Stop)?;
        }
        return Ok(out);
    }
    sectors.chain(wanted.start, &fats, wanted.len, true)
}

/// A directory entry: its name, first sector and length.
struct Directory {
    name: String,
    start: u32,
    len: usize,
}

impl Directory {
    fn of(entry: &[u8], sector: usize) -> Step<Directory> {
        let units: Vec<u16> = entry[..64]
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .take_while(|unit| *unit != 0)
            .collect();
        let len = if sector == 512 {
            u32_at(entry, 120)? as usize
        } else {
            let b = &entry[120..128];
            usize::try_from(u64::from_le_bytes([
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
            ]))
            .map_err(|_| Halt::Stop)?
        };
        Ok(Directory {
            name: String::from_utf16_lossy(&units),
            start: u32_at(entry, 116)?,
            len,
        })
    }
}

/// One BIFF record: its type and data, and the bytes it takes with its continuations.
struct Record<'a> {
    kind: u16,
    data: &'a [u8],
    size: usize,
}

/// The records of a stream as calamine's `RecordIter` reads them (continuations joined).
fn records(stream: &[u8]) -> impl Iterator<Item = Step<Record<'_>>> {
    let mut rest = stream;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let record = (|| {
            let before = rest.len();
            let kind = u16_at(rest, 0)?;
            let len = u16_at(rest, 2)? as usize;
            let data = rest.get(4..4 + len).ok_or(Halt::Stop)?;
            rest = &rest[4 + len..];
            while rest.len() > 4 && u16_at(rest, 0)? == 0x003C {
                let len = u16_at(rest, 2)? as usize;
                rest = rest.get(4 + len..).ok_or(Halt::Stop)?;
            }
            Ok(Record {
                kind,
                data,
                size: before - rest.len(),
            })
        })();
        if record.is_err() {
            rest = &[];
        }
        Some(record)
    })
}

/// The sheets of the workbook stream: their offsets from the globals, then each sheet's cells.
fn sheets(stream: &[u8]) -> Step<()> {
    let mut offsets = Vec::new();
    for record in records(stream) {
        let record = record?;
        match record.kind {
            0x0085 => offsets.push(u32_at(record.data, 0)? as usize),
            0x000A => break,
            _ => {}
        }
    }
    let (mut total, mut read) = (0u64, 0usize);
    for (n, offset) in offsets.into_iter().enumerate() {
        let sheet = stream.get(offset..).ok_or(Halt::Stop)?;
        let (cells, length) = sheet_cells(sheet, n)?;
        read = read.saturating_add(length);
        if read > stream.len() {
            return Err(too_complex(
                "the xls file's sheets overlap in its workbook stream (each would be read again)",
            )
            .into());
        }
        total = total.saturating_add(cells);
        if total > WORKBOOK_CELLS {
            return Err(too_complex(format!(
                "the workbook's sheets span more than {WORKBOOK_CELLS} cells together (1 GiB)"
            ))
            .into());
        }
    }
    Ok(())
}

/// One sheet's dense cells (and the reservation its `DIMENSIONS` asks for), and the bytes of
/// the stream read for it.
fn sheet_cells(sheet: &[u8], n: usize) -> Step<(u64, usize)> {
    let mut used: Option<((u32, u32), (u32, u32))> = None;
    let mut add = |row: u32, col: u32| {
        used = Some(match used {
            None => ((row, col), (row, col)),
            Some((first, last)) => (
                (first.0.min(row), first.1.min(col)),
                (last.0.max(row), last.1.max(col)),
            ),
        });
    };
    let (mut seen_bof, mut depth, mut length) = (false, 0usize, 0usize);
    let mut reserved = 0u64;
    for record in records(sheet) {
        let record = record?;
        length += record.size;
        if depth > 0 {
            match record.kind {
                0x0809 => depth += 1,
                0x000A => depth -= 1,
                _ => {}
            }
            continue;
        }
        let at = |min: usize| -> Step<(u32, u32)> {
            if record.data.len() < min {
                return Err(Halt::Stop);
            }
            Ok((
                u32::from(u16_at(record.data, 0)?),
                u32::from(u16_at(record.data, 2)?),
            ))
        };
        match record.kind {
            0x0809 if seen_bof => depth += 1,
            0x0809 => seen_bof = true,
            0x0200 => reserved = reserved.max(dimensions(record.data)?),
            0x0203 => {
                let (row, col) = at(14)?;
                add(row, col);
            }
            0x0204 | 0x00D6 => {
                let (row, col) = at(6)?;
                add(row, col);
            }
            0x0205 => {
                let (row, col) = at(8)?;
                add(row, col);
            }
            0x027E | 0x00FD => {
                let (row, col) = at(10)?;
                add(row, col);
            }
            0x0006 => {
                let (row, col) = at(20)?;
                add(row, col);
            }
            0x00BD => {
                let (row, first) = at(6)?;
                let last = u16_at(record.data, record.data.len() - 2)?;
                let count = last.wrapping_sub(first as u16).wrapping_add(1) as usize;
                if record.data.len() != 6 + 6 * count {
                    return Err(Halt::Stop);
                }
                add(row, first);
                add(row, first + count as u32 - 1);
            }
            0x000A => break,
            _ => {}
        }
    }
    let cells = used.map_or(0, |(first, last)| {
        u64::from(last.0 - first.0 + 1) * u64::from(last.1 - first.1 + 1)
    });
    if cells.max(reserved) > SHEET_CELLS {
        return Err(too_complex(format!(
            "sheet {} of the xls file spans {} cells; a sheet is read whole and may span at most {SHEET_CELLS} (256 MiB)",
            n + 1,
            cells.max(reserved)
        ))
        .into());
    }
    Ok((cells, length))
}

/// The cells a `DIMENSIONS` record makes calamine reserve (its arithmetic wraps as calamine's
/// does in release builds).
fn dimensions(data: &[u8]) -> Step<u64> {
    let (rf, rl, mut cf, cl) = match data.len() {
        10 => (
            u32::from(u16_at(data, 0)?),
            u32::from(u16_at(data, 2)?),
            u32::from(u16_at(data, 4)?),
            u32::from(u16_at(data, 6)?),
        ),
        14 | 16 => (
            u32_at(data, 0)?,
            u32_at(data, 4)?,
            u32::from(u16_at(data, 8)?),
            u32::from(u16_at(data, 10)?),
        ),
        _ => return Err(Halt::Stop),
    };
    if 0xFF < cf || cl < cf {
        cf = 0;
    }
    let (start, end) = if rl >= 1 && cl >= 1 {
        ((rf, cf), (rl - 1, cl - 1))
    } else {
        ((rf, cf), (rf, cf))
    };
    let rows = u64::from(end.0.wrapping_sub(start.0).wrapping_add(1));
    let cols = u64::from(end.1.wrapping_sub(start.1).wrapping_add(1));
    Ok(rows.saturating_mul(cols))
}
