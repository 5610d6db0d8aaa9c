//! One block of ClickHouse's Native format, column by column (see streams/native.py for
//! the layout): LEB128 column and row counts, then per column its name, its type and its
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

    pub fn u32s(&mut self, name: &str, type_name: &str, values: impl Iterator<Item = u32>) {
        self.header(name, type_name);
        for value in values {
            self.bytes.extend_from_slice(&value.to_le_bytes());
        }
    }

    pub fn i32s(&mut self, name: &str, type_name: &str, values: impl Iterator<Item = i32>) {
        self.header(name, type_name);
        for value in values {
            self.bytes.extend_from_slice(&value.to_le_bytes());
        }
    }

    pub fn u64s(&mut self, name: &str, type_name: &str, values: impl Iterator<Item = u64>) {
        self.header(name, type_name);
        for value in values {
            self.bytes.extend_from_slice(&value.to_le_bytes());
        }
    }

    pub fn i64s(&mut self, name: &str, type_name: &str, values: impl Iterator<Item = i64>) {
        self.header(name, type_name);
        for value in values {
            self.bytes.extend_from_slice(&value.to_le_bytes());
        }
    }

    pub fn i8s(&mut self, name: &str, type_name: &str, values: impl Iterator<Item = i8>) {
        self.header(name, type_name);
        self.bytes.extend(values.map(|v| v as u8));
    }
}
