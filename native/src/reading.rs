//! The fast path of SPEC §3 validation, as in `schemas/quick_parser.py`: a plainly valid single
//! reading is taken here; anything unusual (an escape in a string, an exponent, a key out of
//! place, an offset other than `Z`, …) returns `None` and Python's definition judges it.
//! So this never refuses anything and never accepts what `schemas.events.parse_reading`
//! would refuse. Numbers are read from their decimal text, exactly: no floats anywhere.

use std::collections::HashSet;

pub const MAX_FUTURE_S: i64 = 600;
pub const MIN_SECOND: i64 = 946_684_800; // 2000-01-01T00:00:00Z
pub const MAX_MEM_MIB: u64 = 1 << 40;
const MAX_TEXT: usize = 256;
const MAX_EVENT_ID: usize = 128;
const MAX_EPOCH: usize = 128;
const MAX_COUNTER_MJ: u64 = (1 << 63) - 1; // a signed 64-bit counter (billing_rules/counters.py)

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Usage,
    Power,
}

/// A valid reading, borrowing its texts from the message.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub kind: Kind,
    pub event_id: &'a str,
    pub ts: &'a str,
    pub second: i64,
    pub site: &'a str,
    pub node: &'a str,
    pub gpu: &'a str,
    pub model: &'a str,
    pub tenant: Option<&'a str>,
    pub instance: Option<&'a str>,
    pub util_e4: i64, // util_pct × 10^4, rounded half up
    pub mem_mib: u64,
    pub power_mw: i64, // power_w × 10^3, rounded half up
    /// The card's counter (power readings that carry one: `epoch` is then Some), else 0.
    pub energy_mj: u64,
    pub epoch: Option<&'a str>,
}

#[derive(Clone, Copy)]
enum Value<'a> {
    Text(&'a str),
    Number(&'a [u8]),
    Null,
}

/// The plainly valid reading in `raw`, or None (let the definition judge).
pub fn parse<'a>(raw: &'a [u8], now_s: i64, expect: Kind, sites: &HashSet<String>, models: &HashSet<String>) -> Option<Parsed<'a>> {
    let fields = object(raw)?;
    let mut slots: [Option<Value<'a>>; 13] = [None; 13];
    for (key, value) in fields.iter() {
        let slot = match *key {
            b"kind" => 0,
            b"event_id" => 1,
            b"ts" => 2,
            b"site" => 3,
            b"node" => 4,
            b"gpu_uuid" => 5,
            b"gpu_model" => 6,
            b"tenant" => 7,
            b"instance" => 8,
            b"util_pct" => 9,
            b"mem_used_mib" => 10,
            b"power_w" => 9, // shares the number's slot; the key count tells the kinds apart
            b"energy_mj" => 11,
            b"energy_epoch" => 12,
            _ => return None,
        };
        if slots[slot].is_some() {
            return None; // a repeated key (or both util_pct and power_w): the definition refuses it
        }
        slots[slot] = Some(*value);
    }
    // A counter comes whole (energy_mj and energy_epoch) or not at all: one alone is for the
    // definition to refuse. Only power readings carry one.
    let counter = match (slots[11], slots[12]) {
        (None, None) => false,
        (Some(_), Some(_)) => true,
        _ => return None,
    };
    let kind = match text(slots[0]?)? {
        "usage" if fields.len() == 11 && !counter && fields.iter().all(|(k, _)| *k != b"power_w") => Kind::Usage,
        "power" if fields.len() == 7 + 2 * usize::from(counter) && fields.iter().any(|(k, _)| *k == b"power_w") => Kind::Power,
        _ => return None,
    };
    if kind != expect {
        return None;
    }
    let event_id = text(slots[1]?)?;
    let ts = text(slots[2]?)?;
    let site = text(slots[3]?)?;
    let node = text(slots[4]?)?;
    let gpu = text(slots[5]?)?;
    if !sized(event_id, MAX_EVENT_ID) || !sized(node, MAX_TEXT) || !sized(gpu, MAX_TEXT) || !sites.contains(site) {
        return None;
    }
    let second = timestamp(ts)?;
    if second < MIN_SECOND || second > now_s + MAX_FUTURE_S {
        return None;
    }
    let number = match slots[9]? {
        Value::Number(digits) => digits,
        _ => return None,
    };
    let mut reading = Parsed {
        kind, event_id, ts, second, site, node, gpu, model: "", tenant: None, instance: None,
        util_e4: 0, mem_mib: 0, power_mw: 0, energy_mj: 0, epoch: None,
    };
    if kind == Kind::Power {
        reading.power_mw = scaled(number, 3, 5000)?;
        if counter {
            reading.energy_mj = match slots[11]? {
                Value::Number(digits) => counter_mj(digits)?,
                _ => return None,
            };
            let epoch = text(slots[12]?)?;
            if !sized(epoch, MAX_EPOCH) {
                return None;
            }
            reading.epoch = Some(epoch);
        }
        return Some(reading);
    }
    reading.util_e4 = scaled(number, 4, 100)?;
    reading.model = text(slots[6]?)?;
    if !models.contains(reading.model) {
        return None;
    }
    reading.tenant = optional_text(slots[7]?)?;
    if reading.tenant.is_some_and(|tenant| !is_id(tenant)) {
        return None; // the definition refuses it with its reason
    }
    reading.instance = optional_text(slots[8]?)?;
    reading.mem_mib = match slots[10]? {
        Value::Number(digits) if digits.iter().all(u8::is_ascii_digit) && digits.len() <= 13 => {
            std::str::from_utf8(digits).ok()?.parse::<u64>().ok().filter(|mib| *mib <= MAX_MEM_MIB)?
        }
        _ => return None,
    };
    Some(reading)
}

/// A counter in whole mJ: plain decimal digits (no fraction, no exponent; the JSON reader
/// refused a leading zero), 0 ..= 2^63 − 1.
fn counter_mj(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')); // < 10^19 < 2^64
    (value <= MAX_COUNTER_MJ).then_some(value)
}

fn text(value: Value<'_>) -> Option<&str> {
    match value {
        Value::Text(text) => Some(text),
        _ => None,
    }
}

fn optional_text(value: Value<'_>) -> Option<Option<&str>> {
    match value {
        Value::Null => Some(None),
        Value::Text(text) if sized(text, MAX_TEXT) => Some(Some(text)),
        _ => None,
    }
}

/// The id syntax of schemas/ids.py (`ID_PATTERN`): an ASCII letter or digit, then up to 63
/// ASCII letters, digits, `.`, `_` or `-`.
pub fn is_id(text: &str) -> bool {
    let b = text.as_bytes();
    (1..=64).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b[1..].iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// 1..=limit characters (code points, as Python counts them).
fn sized(text: &str, limit: usize) -> bool {
    !text.is_empty() && (text.len() <= limit || text.chars().count() <= limit)
}

/// The non-negative decimal `digits` (JSON: no sign, no exponent) × 10^scale, rounded half
/// up, when it lies in [0, top]; None for anything else.
fn scaled(digits: &[u8], scale: u32, top: i64) -> Option<i64> {
    let (whole, fraction) = match digits.iter().position(|b| *b == b'.') {
        Some(dot) => (&digits[..dot], &digits[dot + 1..]),
        None => (digits, &digits[..0]),
    };
    if whole.is_empty() || whole.len() > 6 || !whole.iter().all(u8::is_ascii_digit) || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits.contains(&b'.') && fraction.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for digit in whole {
        value = value * 10 + i64::from(digit - b'0');
    }
    if value > top {
        return None;
    }
    let kept = fraction.len().min(scale as usize);
    for digit in fraction[..kept].iter().copied().chain(std::iter::repeat(b'0')).take(scale as usize) {
        value = value * 10 + i64::from(digit - b'0');
    }
    let limit = top * 10_i64.pow(scale);
    let rest = &fraction[kept..];
    if value == limit && rest.iter().any(|d| *d != b'0') {
        return None; // above the top, however little
    }
    if rest.first().is_some_and(|d| *d >= b'5') {
        value += 1; // half up: the dropped digits are worth at least one half
    }
    Some(value)
}

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z` → UTC epoch second (floor); other forms → None.
pub fn timestamp(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let fraction = &b[19..b.len() - 1];
    if !fraction.is_empty() && (fraction[0] != b'.' || !(2..=10).contains(&fraction.len()) || !fraction[1..].iter().all(u8::is_ascii_digit)) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = &b[range];
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The members of a flat JSON object of strings without escapes, plain numbers and null;
/// None for anything else (nesting, escapes, booleans, bad JSON: the definition decides).
fn object(raw: &[u8]) -> Option<Vec<(&[u8], Value<'_>)>> {
    let mut at = 0;
    let skip = |at: &mut usize| {
        while *at < raw.len() && matches!(raw[*at], b' ' | b'\t' | b'\n' | b'\r') {
            *at += 1;
        }
    };
    if raw.first() != Some(&b'{') {
        return None;
    }
    at += 1;
    let mut fields = Vec::with_capacity(11);
    skip(&mut at);
    if raw.get(at) == Some(&b'}') {
        return None; // {} is no reading
    }
    loop {
        skip(&mut at);
        let key = span(raw, &mut at)?; // matched against the ASCII names as bytes
        skip(&mut at);
        if raw.get(at) != Some(&b':') {
            return None;
        }
        at += 1;
        skip(&mut at);
        let value = match raw.get(at)? {
            b'"' => Value::Text(string(raw, &mut at)?),
            b'n' if raw[at..].starts_with(b"null") => {
                at += 4;
                Value::Null
            }
            b'0'..=b'9' => {
                let start = at;
                while at < raw.len() && (raw[at].is_ascii_digit() || raw[at] == b'.') {
                    at += 1;
                }
                let digits = &raw[start..at];
                if digits.len() > 1 && digits[0] == b'0' && digits[1] != b'.' {
                    return None; // a leading zero is not JSON
                }
                Value::Number(digits)
            }
            _ => return None,
        };
        fields.push((key, value));
        skip(&mut at);
        match raw.get(at)? {
            b',' => at += 1,
            b'}' => {
                at += 1;
                skip(&mut at);
                return if at == raw.len() { Some(fields) } else { None };
            }
            _ => return None,
        }
    }
}

/// A JSON string without escapes or control characters, as UTF-8; `at` is on its quote.
fn string<'a>(raw: &'a [u8], at: &mut usize) -> Option<&'a str> {
    std::str::from_utf8(span(raw, at)?).ok()
}

/// The bytes of a JSON string without escapes or control characters; `at` is on its quote.
fn span<'a>(raw: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    if raw.get(*at) != Some(&b'"') {
        return None;
    }
    let start = *at + 1;
    let mut end = start;
    // Eight bytes at a time while none is a quote, a backslash, a control character or
    // non-ASCII (the strings here are ids and timestamps: ASCII, 10–40 bytes); then bytewise.
    while let Some(word) = raw.get(end..end + 8) {
        if plain_ascii(u64::from_le_bytes(word.try_into().expect("8 bytes"))) {
            end += 8;
        } else {
            break;
        }
    }
    loop {
        match *raw.get(end)? {
            b'"' => break,
            b'\\' | 0..=0x1f => return None,
            _ => end += 1,
        }
    }
    *at = end + 1;
    Some(&raw[start..end])
}

/// Whether none of the eight bytes of `word` is `"`, `\`, below 0x20 or above 0x7f (SWAR:
/// a byte b < n sets its high bit in (word − n per byte) & !word, borrows aside, and a
/// borrow only runs past a byte that already matched).
fn plain_ascii(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let quote = below(word ^ (ONES * u64::from(b'"')), 1);
    let backslash = below(word ^ (ONES * u64::from(b'\\')), 1);
    (quote | backslash | below(word, 0x20) | (word & HIGH)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_exactly_half_up() {
        assert_eq!(scaled(b"87.5", 4, 100), Some(875_000));
        assert_eq!(scaled(b"0.00005", 4, 100), Some(1)); // 0.00005 → 0.0001 (half up)
        assert_eq!(scaled(b"0.000049999", 4, 100), Some(0));
        assert_eq!(scaled(b"100", 4, 100), Some(1_000_000));
        assert_eq!(scaled(b"100.00001", 4, 100), None);
        assert_eq!(scaled(b"101", 4, 100), None);
        assert_eq!(scaled(b"412.3456", 3, 5000), Some(412_346));
        assert_eq!(scaled(b"1.", 3, 5000), None);
    }

    #[test]
    fn reads_strings_up_to_their_quote() {
        let text = |raw: &[u8]| string(raw, &mut 0).map(str::to_owned);
        assert_eq!(text(br#""GPU-5f1c2b9e-0d7a-4c11-9b7e-2f6d3a8c9e01","#).as_deref(), Some("GPU-5f1c2b9e-0d7a-4c11-9b7e-2f6d3a8c9e01"));
        assert_eq!(text(br#""""#).as_deref(), Some(""));
        assert_eq!(text("\"nœud-01 ünïcode\"".as_bytes()).as_deref(), Some("nœud-01 ünïcode"));
        for bad in [&br#""abcdefgh\"ijk""#[..], b"\"abcdefghij\tk\"", b"\"abcdefgh", b"\"abc", b"\"abcdefgh\xffij\""] {
            assert_eq!(text(bad), None, "{bad:?}");
        }
        // Every byte value at every place of a word, against the bytewise definition.
        for place in 0..8 {
            for byte in 0..=255u8 {
                let mut word = *b"abcdefgh";
                word[place] = byte;
                let plain = (0x20..0x80).contains(&byte) && byte != b'"' && byte != b'\\';
                assert_eq!(plain_ascii(u64::from_le_bytes(word)), plain, "{byte:#x} at {place}");
            }
        }
    }

    #[test]
    fn ids_as_schemas_ids() {
        for good in ["a", "A9", "tenant-01", "acme.cn_2", &"x".repeat(64)] {
            assert!(is_id(good), "{good:?}");
        }
        for bad in ["", "-a", ".a", "_a", "a/b", "..", "a b", "a\0", "a\n", "\u{202e}a", "аcme", &"x".repeat(65)] {
            assert!(!is_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn leaves_repeated_keys_and_non_id_tenants_to_the_definition() {
        let sites: HashSet<String> = ["gz".to_owned()].into();
        let models: HashSet<String> = ["A800".to_owned()].into();
        let usage = |tenant: &str, extra: &str| {
            format!(r#"{{"kind":"usage","event_id":"e1","ts":"2026-03-01T00:00:05Z","site":"gz","node":"n1","gpu_uuid":"g1","gpu_model":"A800","tenant":{tenant},"instance":null,"util_pct":50,"mem_used_mib":1{extra}}}"#)
        };
        let now = 1_772_323_205;
        assert!(parse(usage(r#""acme""#, "").as_bytes(), now, Kind::Usage, &sites, &models).is_some());
        assert!(parse(usage("null", "").as_bytes(), now, Kind::Usage, &sites, &models).is_some());
        for tenant in [r#""a/b""#, r#""..""#, r#""a b""#, r#""аcme""#, r#""-x""#] {
            assert!(parse(usage(tenant, "").as_bytes(), now, Kind::Usage, &sites, &models).is_none(), "{tenant}");
        }
        let twice = usage(r#""victim""#, r#","tenant":"attacker""#);
        assert!(parse(twice.as_bytes(), now, Kind::Usage, &sites, &models).is_none());
    }

    #[test]
    fn takes_a_whole_counter_and_leaves_half_of_one_to_the_definition() {
        let sites: HashSet<String> = ["gz".to_owned()].into();
        let models = HashSet::new();
        let power = |extra: &str| {
            format!(r#"{{"kind":"power","event_id":"p1","ts":"2026-03-01T00:00:05Z","site":"gz","node":"n1","gpu_uuid":"g1","power_w":300{extra}}}"#)
        };
        let now = 1_772_323_205;
        let read = |extra: &str| {
            parse(power(extra).as_bytes(), now, Kind::Power, &sites, &models).map(|p| (p.energy_mj, p.epoch.map(str::to_owned)))
        };
        assert_eq!(read(""), Some((0, None)));
        assert_eq!(read(r#","energy_mj":0,"energy_epoch":"b""#), Some((0, Some("b".to_owned()))));
        assert_eq!(read(r#","energy_epoch":"boot-1","energy_mj":9223372036854775807"#),
                   Some((9_223_372_036_854_775_807, Some("boot-1".to_owned()))));
        let long = "é".repeat(128);
        assert_eq!(read(&format!(r#","energy_mj":5,"energy_epoch":"{long}""#)), Some((5, Some(long))));
        for bad in [
            r#","energy_mj":5"#, r#","energy_epoch":"b""#, r#","energy_mj":9223372036854775808,"energy_epoch":"b""#,
            r#","energy_mj":99999999999999999999,"energy_epoch":"b""#, r#","energy_mj":5.0,"energy_epoch":"b""#,
            r#","energy_mj":1e3,"energy_epoch":"b""#, r#","energy_mj":-1,"energy_epoch":"b""#,
            r#","energy_mj":01,"energy_epoch":"b""#, r#","energy_mj":"5","energy_epoch":"b""#,
            r#","energy_mj":null,"energy_epoch":null"#, r#","energy_mj":5,"energy_epoch":"""#,
            r#","energy_mj":5,"energy_epoch":5"#, r#","energy_mj":5,"energy_epoch":"b","energy_mj":6"#,
            r#","energy_mj":5,"energy_epoch":"b","extra":1"#,
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
        assert_eq!(read(&format!(r#","energy_mj":5,"energy_epoch":"{}""#, "x".repeat(129))), None);
        // A usage reading never carries one.
        let models: HashSet<String> = ["A800".to_owned()].into();
        let usage = r#"{"kind":"usage","event_id":"e1","ts":"2026-03-01T00:00:05Z","site":"gz","node":"n1","gpu_uuid":"g1","gpu_model":"A800","tenant":null,"instance":null,"util_pct":50,"mem_used_mib":1,"energy_mj":5,"energy_epoch":"b"}"#;
        assert!(parse(usage.as_bytes(), now, Kind::Usage, &sites, &models).is_none());
    }

    #[test]
    fn reads_utc_timestamps() {
        assert_eq!(timestamp("2026-03-01T00:00:05Z"), Some(1_772_323_205));
        assert_eq!(timestamp("2026-03-01T00:00:05.999999999Z"), Some(1_772_323_205));
        assert_eq!(timestamp("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(timestamp("2025-02-29T00:00:00Z"), None);
        assert_eq!(timestamp("2026-03-01T00:00:05+08:00"), None);
        assert_eq!(timestamp("2026-03-01T24:00:00Z"), None);
    }
}
