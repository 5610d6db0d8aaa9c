//! Kafka record sets as the broker sends them (message format v2, uncompressed), read in
//! place: the worker hands the core a partition's fetched bytes instead of one Python
//! object per record, which is what a Python consumer spends most of its time making.
//!
//! Layout (Kafka's `DefaultRecordBatch`): a 61-byte batch header — base offset (i64),
//! length (i32), leader epoch (i32), magic (i8), CRC (u32), attributes (i16), last offset
//! delta (i32), first and max timestamps (i64), producer id (i64), epoch (i16), base
//! sequence (i32), record count (i32) — then the records, each: length, attributes (i8),
//! timestamp delta, offset delta, key, value and headers, with zigzag varints for lengths
//! and deltas. Every batch's CRC-32C is checked here. Python sends here only sets whose
//! batches are all v2 and uncompressed (`RecordSet.plain`, streams/kafka/record_sets.py);
//! anything else is refused with an error, as is a batch whose CRC does not match.

const HEADER: usize = 61;
const COMPRESSION: i16 = 0x07;
const LOG_APPEND_TIME: i16 = 0x08;
const CONTROL: i16 = 0x20;

/// One record of a set, borrowing from it.
pub struct Record<'a> {
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The headers as sent (count, then names and values): read only for the records
    /// Python judges (`headers`), not on the fast path.
    pub headers: &'a [u8],
}

/// A record header: name, and value (None when null).
pub type Header<'a> = (&'a [u8], Option<&'a [u8]>);

/// The headers of a record, from `Record::headers`.
pub fn headers(raw: &[u8]) -> Result<Vec<Header<'_>>, String> {
    let mut cursor = Cursor { data: raw, at: 0 };
    let count = cursor.varlong()?;
    let mut out = Vec::new();
    for _ in 0..count.max(0) {
        let name = cursor.bytes()?.ok_or_else(corrupt)?;
        out.push((name, cursor.bytes()?));
    }
    Ok(out)
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.data.len()).ok_or_else(corrupt)?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn varlong(&mut self) -> Result<i64, String> {
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = *self.data.get(self.at).ok_or_else(corrupt)?;
            self.at += 1;
            raw |= u64::from(byte & 0x7f).checked_shl(shift).ok_or_else(corrupt)?;
            if byte & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64)); // zigzag
            }
        }
        Err(corrupt())
    }

    /// A length-prefixed byte string; a negative length is null.
    fn bytes(&mut self) -> Result<Option<&'a [u8]>, String> {
        match self.varlong()? {
            n if n < 0 => Ok(None),
            n => Ok(Some(self.take(usize::try_from(n).map_err(|_| corrupt())?)?)),
        }
    }
}

fn corrupt() -> String {
    "corrupt Kafka record batch".to_owned()
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// Calls `take` for every record of `data` at or after offset `start`, in order, skipping
/// control batches (transaction markers). A batch cut short at the end of the fetch is not
/// read (the broker sends it whole next time); `start` skips the records before the fetch
/// position in a batch the broker sent whole.
pub fn walk<'a>(data: &'a [u8], start: u64, mut take: impl FnMut(Record<'a>)) -> Result<(), String> {
    let mut at = 0;
    while at + HEADER <= data.len() {
        let length = usize::try_from(be_i32(data, at + 8)).map_err(|_| corrupt())?;
        let end = at + 12 + length;
        if end > data.len() {
            break;
        }
        if end < at + HEADER {
            return Err(corrupt());
        }
        let magic = data[at + 16];
        let attributes = be_i16(data, at + 21);
        if magic != 2 || attributes & COMPRESSION != 0 {
            return Err(format!("record batch v{magic} with compression {} reached the core", attributes & COMPRESSION));
        }
        // CRC-32C of everything after the CRC field (the CPU's instruction where it has one).
        let crc = u32::from_be_bytes(data[at + 17..at + 21].try_into().expect("4 bytes"));
        if crc32c::crc32c(&data[at + 21..end]) != crc {
            return Err(format!("invalid CRC in the record batch at offset {}", be_i64(data, at)));
        }
        let base_offset = u64::try_from(be_i64(data, at)).map_err(|_| corrupt())?;
        let first_timestamp = be_i64(data, at + 27);
        let max_timestamp = be_i64(data, at + 35);
        let count = usize::try_from(be_i32(data, at + 57)).map_err(|_| corrupt())?;
        if attributes & CONTROL == 0 {
            let mut cursor = Cursor { data: &data[..end], at: at + HEADER };
            for _ in 0..count {
                let length = usize::try_from(cursor.varlong()?).map_err(|_| corrupt())?;
                let record_end = cursor.at.checked_add(length).filter(|&e| e <= end).ok_or_else(corrupt)?;
                let mut record = Cursor { data: &data[..record_end], at: cursor.at };
                record.take(1)?; // attributes: unused
                let timestamp_delta = record.varlong()?;
                let offset = base_offset.checked_add_signed(record.varlong()?).ok_or_else(corrupt)?;
                let key = record.bytes()?;
                let value = record.bytes()?;
                let headers = &data[record.at..record_end];
                cursor.at = record_end;
                if offset >= start {
                    let timestamp = if attributes & LOG_APPEND_TIME != 0 { max_timestamp } else { first_timestamp + timestamp_delta };
                    take(Record { offset, timestamp, key, value, headers });
                }
            }
        }
        at = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(out: &mut Vec<u8>, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        loop {
            let byte = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn batch(base: i64, attributes: i16, records: &[(i64, Option<&[u8]>)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (delta, value) in records {
            let mut r = vec![0u8];
            varint(&mut r, *delta * 10); // timestamp delta
            varint(&mut r, *delta);
            varint(&mut r, 2);
            r.extend_from_slice(b"k1");
            match value {
                Some(v) => {
                    varint(&mut r, v.len() as i64);
                    r.extend_from_slice(v);
                }
                None => varint(&mut r, -1),
            }
            varint(&mut r, 1);
            varint(&mut r, 1);
            r.push(b'h');
            varint(&mut r, -1);
            varint(&mut body, r.len() as i64);
            body.extend(r);
        }
        let mut out = Vec::new();
        out.extend(base.to_be_bytes());
        out.extend(((HEADER - 12 + body.len()) as i32).to_be_bytes());
        out.extend(0i32.to_be_bytes());
        out.push(2);
        out.extend(0u32.to_be_bytes());
        out.extend(attributes.to_be_bytes());
        out.extend((records.len() as i32 - 1).to_be_bytes());
        out.extend(1000i64.to_be_bytes());
        out.extend(2000i64.to_be_bytes());
        out.extend((-1i64).to_be_bytes());
        out.extend((-1i16).to_be_bytes());
        out.extend((-1i32).to_be_bytes());
        out.extend((records.len() as i32).to_be_bytes());
        out.extend(body);
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// (offset, timestamp, value) of each record read.
    type Read = (u64, i64, Option<Vec<u8>>);

    fn offsets(data: &[u8], start: u64) -> Result<Vec<Read>, String> {
        let mut seen = Vec::new();
        walk(data, start, |r| {
            assert_eq!(r.key, Some(&b"k1"[..]));
            assert_eq!(headers(r.headers).unwrap(), vec![(&b"h"[..], None)]);
            seen.push((r.offset, r.timestamp, r.value.map(<[u8]>::to_vec)));
        })?;
        Ok(seen)
    }

    #[test]
    fn reads_records_from_the_start_offset_and_skips_control_batches() {
        let mut data = batch(5, 0, &[(0, Some(b"a")), (1, None), (2, Some(b"c"))]);
        data.extend(batch(8, CONTROL, &[(0, Some(b"x"))]));
        data.extend(batch(9, LOG_APPEND_TIME, &[(0, Some(b"d"))]));
        let seen = offsets(&data, 6).unwrap();
        assert_eq!(seen, vec![(6, 1010, None), (7, 1020, Some(b"c".to_vec())), (9, 2000, Some(b"d".to_vec()))]);
    }

    #[test]
    fn stops_at_a_batch_cut_short_and_refuses_what_is_not_plain_v2_or_fails_its_crc() {
        let whole = batch(0, 0, &[(0, Some(b"a"))]);
        let mut data = whole.clone();
        data.extend(&whole[..whole.len() - 3]);
        assert_eq!(offsets(&data, 0).unwrap().len(), 1);
        assert!(offsets(&batch(0, 1, &[(0, Some(b"a"))]), 0).is_err()); // gzip
        let mut flipped = whole.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(offsets(&flipped, 0).unwrap_err().contains("invalid CRC"));
        let mut bad = whole.clone();
        bad.truncate(last - 2); // the record ends past its batch
        let length = (bad.len() - 12) as i32;
        bad[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&bad[21..]);
        bad[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(offsets(&bad, 0).unwrap_err(), corrupt());
    }
}
