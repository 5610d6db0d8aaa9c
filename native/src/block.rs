//! One block of ClickHouse's Native format, column by column (see warehouse/native_format.py
//! for the layout): LEB128 column and row counts, then per column its name, its type and its
//! values, little-endian.

pub struct Block {
    bytes: Vec<u8>,
}

impl Block {
    pub fn new(columns: usize, rows: usize) -> Self {
        let mut block = Block { bytes: Vec::with_capacity(64 + rows * 160) };
        block.leb128(columns as u64);
        block.leb128(rows as u64);
        block
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    fn leb128(&mut self, mut n: u64) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.bytes.push(byte);
                return;
            }
            self.bytes.push(byte | 0x80);
        }
    }

    fn text(&mut self, value: &str) {
        self.leb128(value.len() as u64);
        self.bytes.extend_from_slice(value.as_bytes());
    }

    fn header(&mut self, name: &str, type_name: &str) {
        self.text(name);
        self.text(type_name);
    }

    pub fn strings<'a>(&mut self, name: &str, values: impl Iterator<Item = &'a str>) {
        self.header(name, "String");
        for value in values {
            self.text(value);
        }
    }

    pub fn nullable_strings<'a>(&mut self, name: &str, values: impl Iterator<Item = Option<&'a str>> + Clone) {
        self.header(name, "Nullable(String)");
        for value in values.clone() {
            self.bytes.push(u8::from(value.is_none()));
        }
        for value in values {
            self.text(value.unwrap_or(""));
        }
    }

    /// A column of fixed-width numbers (UInt32, Int64, Decimal, DateTime, Enum8, …).
    pub fn numbers<T: LittleEndian>(&mut self, name: &str, type_name: &str, values: impl Iterator<Item = T>) {
        self.header(name, type_name);
        for value in values {
            value.put(&mut self.bytes);
        }
    }
}

/// A number as ClickHouse's Native format stores it: little-endian, fixed width.
pub trait LittleEndian: Copy {
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! little_endian {
    ($($t:ty),*) => {$(
        impl LittleEndian for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

little_endian!(i8, u8, u32, i32, u64, i64);
