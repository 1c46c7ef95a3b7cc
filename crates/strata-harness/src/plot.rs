//! A small chart renderer for `report.md`: an RGB raster with lines,
//! filled rectangles and text from a built-in 5×7 bitmap font, grouped bar
//! charts (linear or log scale) and line charts, encoded to PNG by hand.
//!
//! PNG encoding: the signature, IHDR, one IDAT holding a zlib stream, and
//! IEND, each chunk with its CRC-32. The zlib stream is either stored
//! blocks ([`Deflate::Stored`]) or one fixed-Huffman block whose only
//! back-references are runs of the previous byte ([`Deflate::Runs`]); rows
//! are filtered (None, Sub or Up, whichever leaves the smallest sum) so the
//! flat areas of a chart become long runs of zeros. No dependency.

/// An RGB colour.
pub type Rgb = [u8; 3];

pub const WHITE: Rgb = [255, 255, 255];
pub const BLACK: Rgb = [0, 0, 0];
const GRID: Rgb = [228, 228, 228];
const AXIS: Rgb = [60, 60, 60];
const TEXT: Rgb = [30, 30, 30];

/// Series colours (colour-blind-friendly order of the usual "tab10").
pub const PALETTE: [Rgb; 8] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
];

/// Glyph advance in pixels at scale 1 (5 columns and one of spacing).
const ADVANCE: i32 = 6;
/// Glyph height in pixels at scale 1 (g, j, p, q, y have a descender
/// below it, in bit 7).
const GLYPH_H: i32 = 7;
/// Rows drawn per glyph, descender included.
const GLYPH_ROWS: i32 = 8;

/// 5×7 glyphs for ASCII 32..=126: five columns, bit 0 is the top row
/// (bit 7: the descender row of g, j, p, q, y).
/// (The classic HD44780-style table; characters outside it draw as `?`.)
const FONT: [[u8; 5]; 95] = [
    [0x00, 0x00, 0x00, 0x00, 0x00], // ' '
    [0x00, 0x00, 0x5F, 0x00, 0x00], // !
    [0x00, 0x07, 0x00, 0x07, 0x00], // "
    [0x14, 0x7F, 0x14, 0x7F, 0x14], // #
    [0x24, 0x2A, 0x7F, 0x2A, 0x12], // $
    [0x23, 0x13, 0x08, 0x64, 0x62], // %
    [0x36, 0x49, 0x55, 0x22, 0x50], // &
    [0x00, 0x05, 0x03, 0x00, 0x00], // '
    [0x00, 0x1C, 0x22, 0x41, 0x00], // (
    [0x00, 0x41, 0x22, 0x1C, 0x00], // )
    [0x08, 0x2A, 0x1C, 0x2A, 0x08], // *
    [0x08, 0x08, 0x3E, 0x08, 0x08], // +
    [0x00, 0x50, 0x30, 0x00, 0x00], // ,
    [0x08, 0x08, 0x08, 0x08, 0x08], // -
    [0x00, 0x60, 0x60, 0x00, 0x00], // .
    [0x20, 0x10, 0x08, 0x04, 0x02], // /
    [0x3E, 0x51, 0x49, 0x45, 0x3E], // 0
    [0x00, 0x42, 0x7F, 0x40, 0x00], // 1
    [0x42, 0x61, 0x51, 0x49, 0x46], // 2
    [0x21, 0x41, 0x45, 0x4B, 0x31], // 3
    [0x18, 0x14, 0x12, 0x7F, 0x10], // 4
    [0x27, 0x45, 0x45, 0x45, 0x39], // 5
    [0x3C, 0x4A, 0x49, 0x49, 0x30], // 6
    [0x01, 0x71, 0x09, 0x05, 0x03], // 7
    [0x36, 0x49, 0x49, 0x49, 0x36], // 8
    [0x06, 0x49, 0x49, 0x29, 0x1E], // 9
    [0x00, 0x36, 0x36, 0x00, 0x00], // :
    [0x00, 0x56, 0x36, 0x00, 0x00], // ;
    [0x08, 0x14, 0x22, 0x41, 0x00], // <
    [0x14, 0x14, 0x14, 0x14, 0x14], // =
    [0x00, 0x41, 0x22, 0x14, 0x08], // >
    [0x02, 0x01, 0x51, 0x09, 0x06], // ?
    [0x32, 0x49, 0x79, 0x41, 0x3E], // @
    [0x7E, 0x11, 0x11, 0x11, 0x7E], // A
    [0x7F, 0x49, 0x49, 0x49, 0x36], // B
    [0x3E, 0x41, 0x41, 0x41, 0x22], // C
    [0x7F, 0x41, 0x41, 0x22, 0x1C], // D
    [0x7F, 0x49, 0x49, 0x49, 0x41], // E
    [0x7F, 0x09, 0x09, 0x09, 0x01], // F
    [0x3E, 0x41, 0x49, 0x49, 0x7A], // G
    [0x7F, 0x08, 0x08, 0x08, 0x7F], // H
    [0x00, 0x41, 0x7F, 0x41, 0x00], // I
    [0x20, 0x40, 0x41, 0x3F, 0x01], // J
    [0x7F, 0x08, 0x14, 0x22, 0x41], // K
    [0x7F, 0x40, 0x40, 0x40, 0x40], // L
    [0x7F, 0x02, 0x0C, 0x02, 0x7F], // M
    [0x7F, 0x04, 0x08, 0x10, 0x7F], // N
    [0x3E, 0x41, 0x41, 0x41, 0x3E], // O
    [0x7F, 0x09, 0x09, 0x09, 0x06], // P
    [0x3E, 0x41, 0x51, 0x21, 0x5E], // Q
    [0x7F, 0x09, 0x19, 0x29, 0x46], // R
    [0x46, 0x49, 0x49, 0x49, 0x31], // S
    [0x01, 0x01, 0x7F, 0x01, 0x01], // T
    [0x3F, 0x40, 0x40, 0x40, 0x3F], // U
    [0x1F, 0x20, 0x40, 0x20, 0x1F], // V
    [0x3F, 0x40, 0x38, 0x40, 0x3F], // W
    [0x63, 0x14, 0x08, 0x14, 0x63], // X
    [0x07, 0x08, 0x70, 0x08, 0x07], // Y
    [0x61, 0x51, 0x49, 0x45, 0x43], // Z
    [0x00, 0x7F, 0x41, 0x41, 0x00], // [
    [0x02, 0x04, 0x08, 0x10, 0x20], // backslash
    [0x00, 0x41, 0x41, 0x7F, 0x00], // ]
    [0x04, 0x02, 0x01, 0x02, 0x04], // ^
    [0x40, 0x40, 0x40, 0x40, 0x40], // _
    [0x00, 0x01, 0x02, 0x04, 0x00], // `
    [0x20, 0x54, 0x54, 0x54, 0x78], // a
    [0x7F, 0x48, 0x44, 0x44, 0x38], // b
    [0x38, 0x44, 0x44, 0x44, 0x20], // c
    [0x38, 0x44, 0x44, 0x48, 0x7F], // d
    [0x38, 0x54, 0x54, 0x54, 0x18], // e
    [0x08, 0x7E, 0x09, 0x01, 0x02], // f
    [0x58, 0xA4, 0xA4, 0xA4, 0x7C], // g
    [0x7F, 0x08, 0x04, 0x04, 0x78], // h
    [0x00, 0x44, 0x7D, 0x40, 0x00], // i
    [0x00, 0x80, 0x80, 0x7D, 0x00], // j
    [0x7F, 0x10, 0x28, 0x44, 0x00], // k
    [0x00, 0x41, 0x7F, 0x40, 0x00], // l
    [0x7C, 0x04, 0x18, 0x04, 0x78], // m
    [0x7C, 0x08, 0x04, 0x04, 0x78], // n
    [0x38, 0x44, 0x44, 0x44, 0x38], // o
    [0xFC, 0x24, 0x24, 0x24, 0x18], // p
    [0x18, 0x24, 0x24, 0x24, 0xFC], // q
    [0x7C, 0x08, 0x04, 0x04, 0x08], // r
    [0x48, 0x54, 0x54, 0x54, 0x20], // s
    [0x04, 0x3F, 0x44, 0x40, 0x20], // t
    [0x3C, 0x40, 0x40, 0x20, 0x7C], // u
    [0x1C, 0x20, 0x40, 0x20, 0x1C], // v
    [0x3C, 0x40, 0x30, 0x40, 0x3C], // w
    [0x44, 0x28, 0x10, 0x28, 0x44], // x
    [0x1C, 0xA0, 0xA0, 0xA0, 0x7C], // y
    [0x44, 0x64, 0x54, 0x4C, 0x44], // z
    [0x00, 0x08, 0x36, 0x41, 0x00], // {
    [0x00, 0x00, 0x7F, 0x00, 0x00], // |
    [0x00, 0x41, 0x36, 0x08, 0x00], // }
    [0x08, 0x04, 0x08, 0x10, 0x08], // ~
];

fn glyph(c: char) -> &'static [u8; 5] {
    let i = c as u32;
    let i = if (32..=126).contains(&i) {
        i
    } else {
        '?' as u32
    };
    &FONT[(i - 32) as usize]
}

/// Width in pixels of `s` drawn at `scale`.
pub fn text_width(s: &str, scale: i32) -> i32 {
    let n = s.chars().count() as i32;
    if n == 0 {
        0
    } else {
        (n * ADVANCE - 1) * scale
    }
}

/// An RGB raster, row-major, origin at the top left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    pub fn new(width: usize, height: usize, background: Rgb) -> Canvas {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&background);
        }
        Canvas {
            width,
            height,
            pixels,
        }
    }

    /// The raster, 3 bytes per pixel, row by row.
    #[cfg(test)]
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    #[cfg(test)]
    pub fn get(&self, x: usize, y: usize) -> Option<Rgb> {
        if x < self.width && y < self.height {
            let i = (y * self.width + x) * 3;
            Some([self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]])
        } else {
            None
        }
    }

    /// Sets one pixel; coordinates outside the canvas are ignored.
    pub fn set(&mut self, x: i32, y: i32, c: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height {
            let i = (y as usize * self.width + x as usize) * 3;
            self.pixels[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Fills the rectangle with corners (x0, y0) and (x1, y1), inclusive, in
    /// any order; clipped to the canvas.
    pub fn fill_rect(&mut self, x0: i32, y0: i32, x1: i32, y1: i32, c: Rgb) {
        let (xa, xb) = (x0.min(x1).max(0), x0.max(x1).min(self.width as i32 - 1));
        let (ya, yb) = (y0.min(y1).max(0), y0.max(y1).min(self.height as i32 - 1));
        for y in ya..=yb {
            for x in xa..=xb {
                self.set(x, y, c);
            }
        }
    }

    /// A line from (x0, y0) to (x1, y1) (Bresenham), `thickness` pixels wide.
    pub fn line(&mut self, (x0, y0): (i32, i32), (x1, y1): (i32, i32), thickness: i32, c: Rgb) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        let t = thickness.max(1);
        let lo = -(t - 1) / 2;
        loop {
            self.fill_rect(x + lo, y + lo, x + lo + t - 1, y + lo + t - 1, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Draws `s` with its top-left corner at (x, y), each font pixel a
    /// `scale`×`scale` square.
    pub fn text(&mut self, x: i32, y: i32, s: &str, scale: i32, c: Rgb) {
        for (i, ch) in s.chars().enumerate() {
            let gx = x + i as i32 * ADVANCE * scale;
            for (col, bits) in glyph(ch).iter().enumerate() {
                for row in 0..GLYPH_ROWS {
                    if bits >> row & 1 == 1 {
                        let px = gx + col as i32 * scale;
                        let py = y + row * scale;
                        self.fill_rect(px, py, px + scale - 1, py + scale - 1, c);
                    }
                }
            }
        }
    }

    /// Draws `s` rotated a quarter turn counter-clockwise (reading bottom to
    /// top), its first character's bottom-left corner at (x, y).
    pub fn text_up(&mut self, x: i32, y: i32, s: &str, scale: i32, c: Rgb) {
        for (i, ch) in s.chars().enumerate() {
            let gy = y - i as i32 * ADVANCE * scale;
            for (col, bits) in glyph(ch).iter().enumerate() {
                for row in 0..GLYPH_ROWS {
                    if bits >> row & 1 == 1 {
                        let px = x + row * scale;
                        let py = gy - (col as i32 + 1) * scale + 1;
                        self.fill_rect(px, py, px + scale - 1, py + scale - 1, c);
                    }
                }
            }
        }
    }

    /// Text centred horizontally on `cx`.
    pub fn text_centered(&mut self, cx: i32, y: i32, s: &str, scale: i32, c: Rgb) {
        self.text(cx - text_width(s, scale) / 2, y, s, scale, c);
    }

    /// The PNG file of this canvas.
    pub fn to_png(&self, deflate: Deflate) -> Vec<u8> {
        encode_png(self.width as u32, self.height as u32, &self.pixels, deflate)
    }
}

// ------------------------------------------------------------------ PNG

pub const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

/// How the IDAT zlib stream is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deflate {
    /// Stored (uncompressed) deflate blocks; rows unfiltered. The
    /// reference encoding the tests decode; the report uses `Runs`.
    #[cfg_attr(not(test), allow(dead_code))]
    Stored,
    /// One fixed-Huffman block with runs of the previous byte as the only
    /// back-references; rows filtered. Charts shrink ~50×.
    Runs,
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) as used by PNG.
pub fn crc32(data: &[u8]) -> u32 {
    crc32_update(0xFFFF_FFFF, data) ^ 0xFFFF_FFFF
}

fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    crc
}

/// Adler-32 checksum of a zlib stream's uncompressed data.
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before b overflows u32.
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let start = out.len() - data.len() - 4;
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Encodes an 8-bit RGB raster (`rgb.len() == width * height * 3`) as PNG.
pub fn encode_png(width: u32, height: u32, rgb: &[u8], deflate: Deflate) -> Vec<u8> {
    let stride = width as usize * 3;
    debug_assert_eq!(rgb.len(), stride * height as usize);
    let mut raw = Vec::with_capacity((stride + 1) * height as usize);
    let mut prev: &[u8] = &[];
    for row in rgb.chunks(stride.max(1)).take(height as usize) {
        match deflate {
            Deflate::Stored => {
                raw.push(0);
                raw.extend_from_slice(row);
            }
            Deflate::Runs => filter_row(&mut raw, row, prev),
        }
        prev = row;
    }
    let mut z = vec![0x78, 0x01]; // deflate, 32K window, no dictionary
    match deflate {
        Deflate::Stored => deflate_stored(&mut z, &raw),
        Deflate::Runs => deflate_runs(&mut z, &raw),
    }
    z.extend_from_slice(&adler32(&raw).to_be_bytes());

    let mut out = PNG_SIGNATURE.to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // bit depth 8, colour type 2 (RGB), deflate, adaptive filtering, no interlace
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Appends `row` filtered with whichever of None (0), Sub (1) and Up (2)
/// gives the smallest sum of absolute byte values (the PNG spec heuristic).
fn filter_row(raw: &mut Vec<u8>, row: &[u8], prev: &[u8]) {
    let sub = |i: usize| row[i].wrapping_sub(if i >= 3 { row[i - 3] } else { 0 });
    let up = |i: usize| row[i].wrapping_sub(prev.get(i).copied().unwrap_or(0));
    let cost = |f: &dyn Fn(usize) -> u8| -> u64 {
        (0..row.len())
            .map(|i| u64::from((f(i) as i8).unsigned_abs()))
            .sum()
    };
    let none = |i: usize| row[i];
    let costs = [cost(&none), cost(&sub), cost(&up)];
    let best = (0..3).min_by_key(|&i| costs[i]).unwrap_or(0);
    raw.push(best as u8);
    for i in 0..row.len() {
        raw.push(match best {
            1 => sub(i),
            2 => up(i),
            _ => none(i),
        });
    }
}

fn deflate_stored(z: &mut Vec<u8>, raw: &[u8]) {
    if raw.is_empty() {
        z.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
        return;
    }
    let n = raw.chunks(65535).count();
    for (i, block) in raw.chunks(65535).enumerate() {
        z.push(u8::from(i + 1 == n)); // BFINAL, BTYPE 00
        let len = block.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(block);
    }
}

/// Deflate bit writer: bits go out least significant first.
struct Bits<'a> {
    out: &'a mut Vec<u8>,
    acc: u32,
    n: u32,
}

impl Bits<'_> {
    fn put(&mut self, value: u32, count: u32) {
        self.acc |= value << self.n;
        self.n += count;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code, sent most significant bit first.
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(rev, len);
    }

    fn finish(mut self) {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.acc = 0;
        self.n = 0;
    }
}

/// Fixed-Huffman code of a literal/length symbol (RFC 1951 §3.2.6).
fn fixed_code(sym: u32) -> (u32, u32) {
    match sym {
        0..=143 => (0x30 + sym, 8),
        144..=255 => (0x190 + sym - 144, 9),
        256..=279 => (sym - 256, 7),
        _ => (0xC0 + sym - 280, 8),
    }
}

const LEN_BASE: [u32; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u32; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];

fn deflate_runs(z: &mut Vec<u8>, raw: &[u8]) {
    let mut w = Bits {
        out: z,
        acc: 0,
        n: 0,
    };
    w.put(1, 1); // BFINAL
    w.put(1, 2); // BTYPE 01: fixed Huffman
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        let (c, l) = fixed_code(u32::from(b));
        w.code(c, l);
        i += 1;
        // The bytes after a literal that repeat it: a match at distance 1.
        let mut run = 0;
        while i + run < raw.len() && raw[i + run] == b {
            run += 1;
        }
        while run >= 3 {
            let len = run.min(258) as u32;
            let k = LEN_BASE.iter().rposition(|&base| base <= len).unwrap_or(0);
            let (c, l) = fixed_code(257 + k as u32);
            w.code(c, l);
            w.put(len - LEN_BASE[k], LEN_EXTRA[k]);
            w.code(0, 5); // distance code 0: distance 1
            i += len as usize;
            run -= len as usize;
        }
        // A remainder of 1 or 2 repeats goes out as literals on the next turns.
    }
    let (c, l) = fixed_code(256);
    w.code(c, l);
    w.finish();
}

// --------------------------------------------------------------- charts

/// Axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// One series of a bar chart: a value per group (`None`: no bar).
#[derive(Debug, Clone)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// Drawn on top of the bar in a lighter shade (e.g. index blocks on top
    /// of data blocks); the bar's total is value + stacked.
    pub stacked: Vec<Option<f64>>,
    /// A black tick across the bar at this value (e.g. a physical minimum).
    pub markers: Vec<Option<f64>>,
}

impl BarSeries {
    pub fn new(name: impl Into<String>, values: Vec<Option<f64>>) -> BarSeries {
        BarSeries {
            name: name.into(),
            values,
            stacked: Vec::new(),
            markers: Vec::new(),
        }
    }
}

/// A grouped bar chart: one cluster per group, one bar per series.
#[derive(Debug, Clone)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<BarSeries>,
    pub scale: Scale,
    /// Extra legend lines (what the shades and ticks mean).
    pub notes: Vec<String>,
}

/// One line of a line chart: (x, y) points, drawn in x order.
#[derive(Debug, Clone)]
pub struct LineSeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<LineSeries>,
    pub scale: Scale,
}

/// A rectangle of the canvas a chart is drawn into.
#[derive(Debug, Clone, Copy)]
pub struct Area {
    pub x: i32,
    pub y: i32,
    pub w: i32,
    pub h: i32,
}

fn ok(v: f64) -> bool {
    v.is_finite()
}

/// A y (or x) axis: maps values to pixels between `p0` (value `lo`) and
/// `p1` (value `hi`).
#[derive(Debug, Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    scale: Scale,
}

impl Axis {
    /// An axis covering `values` (non-finite ones, and non-positive ones on
    /// a log axis, ignored). Linear axes start at 0 unless values go below.
    fn fit(values: impl Iterator<Item = f64>, scale: Scale, from_zero: bool) -> Axis {
        let vals: Vec<f64> = values
            .filter(|v| ok(*v) && (scale == Scale::Linear || *v > 0.0))
            .collect();
        let (mut lo, mut hi) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        if vals.is_empty() {
            (lo, hi) = if scale == Scale::Log {
                (1.0, 10.0)
            } else {
                (0.0, 1.0)
            };
        }
        match scale {
            Scale::Log => {
                // A decade below the smallest value, so its bar has a height.
                let lo = 10f64.powf((lo.log10() - 1e-9).floor());
                let mut hi = 10f64.powf(hi.log10().ceil());
                if hi <= lo {
                    hi = lo * 10.0;
                }
                Axis { lo, hi, scale }
            }
            Scale::Linear => {
                if from_zero {
                    lo = lo.min(0.0);
                    hi = hi.max(0.0);
                }
                if hi <= lo {
                    hi = lo + 1.0;
                }
                let step = nice_step((hi - lo) / 5.0);
                Axis {
                    lo: (lo / step).floor() * step,
                    hi: (hi / step).ceil() * step,
                    scale,
                }
            }
        }
    }

    /// Position of `v` in 0..=1 along the axis (clamped).
    fn frac(&self, v: f64) -> f64 {
        let f = match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => {
                if v <= 0.0 {
                    0.0
                } else {
                    (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
                }
            }
        };
        f.clamp(0.0, 1.0)
    }

    fn ticks(&self) -> Vec<f64> {
        match self.scale {
            Scale::Log => {
                let (a, b) = (
                    self.lo.log10().round() as i32,
                    self.hi.log10().round() as i32,
                );
                let decades = b - a;
                let mut t = Vec::new();
                for e in a..=b {
                    let p = 10f64.powi(e);
                    t.push(p);
                    if decades <= 2 && e < b {
                        t.push(2.0 * p);
                        t.push(5.0 * p);
                    }
                }
                t
            }
            Scale::Linear => {
                let step = nice_step((self.hi - self.lo) / 5.0);
                let mut t = Vec::new();
                let mut v = self.lo;
                while v <= self.hi + step * 1e-9 {
                    t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                    v += step;
                }
                t
            }
        }
    }
}

/// The nearest of 1, 2, 5 × 10^k at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || raw.is_infinite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let n = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * p
}

/// Compact number for ticks and bar labels: 0.05, 2.5, 120, 1.5k, 12M.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !v.is_finite() {
        "-".into()
    } else if a >= 1e9 {
        trim(format!("{:.1}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else if a >= 0.01 {
        trim(format!("{v:.2}"))
    } else {
        format!("{v:.0e}")
    }
}

fn lighten(c: Rgb) -> Rgb {
    c.map(|x| (u16::from(x) + 2 * 255).div_euclid(3) as u8)
}

/// Splits `s` into lines at most `max_px` wide at scale 1, preferring
/// breaks before `[`, after `:` or at spaces.
fn wrap(s: &str, max_px: i32) -> Vec<String> {
    let max_chars = ((max_px + 1) / ADVANCE).max(1) as usize;
    let mut lines = Vec::new();
    let mut rest: Vec<char> = s.chars().collect();
    while rest.len() > max_chars {
        let cut = (1..=max_chars)
            .rev()
            .find(|&i| rest[i] == '[' || rest[i] == ' ' || rest[i - 1] == ':')
            .unwrap_or(max_chars);
        lines.push(rest[..cut].iter().collect::<String>().trim().to_string());
        rest = rest[cut..].to_vec();
        while rest.first() == Some(&' ') {
            rest.remove(0);
        }
    }
    lines.push(rest.into_iter().collect());
    lines
}

/// Draws the legend as rows of (swatch, name) flowing left to right from
/// (x, y) within `w` pixels; returns the height used.
fn legend(
    c: &mut Canvas,
    x: i32,
    y: i32,
    w: i32,
    items: &[(String, Rgb)],
    notes: &[String],
) -> i32 {
    let (mut cx, mut cy) = (x, y);
    let line_h = 14;
    for (name, col) in items {
        let iw = 14 + text_width(name, 1) + 16;
        if cx > x && cx + iw > x + w {
            cx = x;
            cy += line_h;
        }
        c.fill_rect(cx, cy, cx + 9, cy + 8, *col);
        c.text(cx + 14, cy + 1, name, 1, TEXT);
        cx += iw;
    }
    for n in notes {
        cy += line_h;
        c.text(x, cy + 1, n, 1, TEXT);
    }
    if items.is_empty() && notes.is_empty() {
        0
    } else {
        cy - y + line_h
    }
}

/// Title, legend, axes frame: returns the plot rectangle.
fn frame(c: &mut Canvas, area: Area, title: &str, legend_h: i32) -> Area {
    c.text_centered(area.x + area.w / 2, area.y + 6, title, 2, TEXT);
    let top = area.y + 6 + 2 * GLYPH_H + 8 + legend_h + 10;
    let left = area.x + 62;
    let bottom = area.y + area.h - 34;
    let right = area.x + area.w - 14;
    Area {
        x: left,
        y: top,
        w: (right - left).max(10),
        h: (bottom - top).max(10),
    }
}

/// Horizontal grid lines and labels of a y axis, the axis lines, and the
/// rotated y label.
fn y_axis(c: &mut Canvas, plot: Area, axis: &Axis, label: &str) {
    let bottom = plot.y + plot.h;
    for t in axis.ticks() {
        let py = bottom - (axis.frac(t) * plot.h as f64).round() as i32;
        c.fill_rect(plot.x + 1, py, plot.x + plot.w, py, GRID);
        c.fill_rect(plot.x - 4, py, plot.x - 1, py, AXIS);
        let s = fmt_num(t);
        c.text(plot.x - 7 - text_width(&s, 1), py - 3, &s, 1, TEXT);
    }
    let ly = plot.y + plot.h / 2 + text_width(label, 1) / 2;
    c.text_up(plot.x - 58, ly, label, 1, TEXT);
}

fn axes_lines(c: &mut Canvas, plot: Area) {
    let bottom = plot.y + plot.h;
    c.fill_rect(plot.x, plot.y, plot.x, bottom, AXIS);
    c.fill_rect(plot.x, bottom, plot.x + plot.w, bottom, AXIS);
}

/// Draws a grouped bar chart into `area` of `c`.
pub fn draw_bar_chart(c: &mut Canvas, area: Area, chart: &BarChart) {
    let items: Vec<(String, Rgb)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), PALETTE[i % PALETTE.len()]))
        .collect();
    // Measure the legend on a scratch canvas so the plot can start below it.
    let mut scratch = Canvas::new(1, 1, WHITE);
    let lh = legend(&mut scratch, 0, 0, area.w - 80, &items, &chart.notes);
    let plot = frame(c, area, &chart.title, lh);
    legend(
        c,
        area.x + 62,
        area.y + 6 + 2 * GLYPH_H + 8,
        area.w - 80,
        &items,
        &chart.notes,
    );

    let at = |v: &Vec<Option<f64>>, g: usize| v.get(g).copied().flatten().filter(|x| ok(*x));
    let mut all = Vec::new();
    for s in &chart.series {
        for g in 0..chart.groups.len() {
            if let Some(v) = at(&s.values, g) {
                all.push(v + at(&s.stacked, g).unwrap_or(0.0));
                all.push(v);
            }
            all.extend(at(&s.markers, g));
        }
    }
    let axis = Axis::fit(all.into_iter(), chart.scale, true);
    y_axis(c, plot, &axis, &chart.y_label);

    let ng = chart.groups.len().max(1) as i32;
    let ns = chart.series.len().max(1) as i32;
    let gw = plot.w / ng;
    let bw = ((gw - 12) / ns).clamp(2, 60);
    let bottom = plot.y + plot.h;
    let ypx = |v: f64| bottom - (axis.frac(v) * plot.h as f64).round() as i32;
    for (g, name) in chart.groups.iter().enumerate() {
        let gx = plot.x + g as i32 * gw;
        let x0 = gx + (gw - bw * ns) / 2;
        for (i, s) in chart.series.iter().enumerate() {
            let col = PALETTE[i % PALETTE.len()];
            let bx = x0 + i as i32 * bw;
            let Some(v) = at(&s.values, g) else { continue };
            if chart.scale == Scale::Log && v <= 0.0 {
                continue;
            }
            let top = ypx(v);
            c.fill_rect(bx + 1, top, bx + bw - 2, bottom - 1, col);
            let mut label_top = top;
            if let Some(st) = at(&s.stacked, g).filter(|x| *x > 0.0) {
                let t2 = ypx(v + st);
                c.fill_rect(bx + 1, t2, bx + bw - 2, top - 1, lighten(col));
                label_top = t2;
            }
            if let Some(m) = at(&s.markers, g) {
                let my = ypx(m);
                c.fill_rect(bx - 1, my - 1, bx + bw, my, BLACK);
                label_top = label_top.min(my - 1);
            }
            let lab = fmt_num(v + at(&s.stacked, g).unwrap_or(0.0));
            if text_width(&lab, 1) <= bw + 4 {
                c.text_centered(bx + bw / 2, label_top - 10, &lab, 1, TEXT);
            }
        }
        for (k, line) in wrap(name, gw - 4).iter().take(3).enumerate() {
            c.text_centered(gx + gw / 2, bottom + 6 + k as i32 * 10, line, 1, TEXT);
        }
    }
    axes_lines(c, plot);
}

/// Draws a line chart into `area` of `c`.
pub fn draw_line_chart(c: &mut Canvas, area: Area, chart: &LineChart) {
    let items: Vec<(String, Rgb)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), PALETTE[i % PALETTE.len()]))
        .collect();
    let mut scratch = Canvas::new(1, 1, WHITE);
    let lh = legend(&mut scratch, 0, 0, area.w - 80, &items, &[]);
    let mut plot = frame(c, area, &chart.title, lh);
    plot.h -= 10; // room for the x label under the tick labels
    legend(
        c,
        area.x + 62,
        area.y + 6 + 2 * GLYPH_H + 8,
        area.w - 80,
        &items,
        &[],
    );
    let pts = || chart.series.iter().flat_map(|s| s.points.iter());
    let yaxis = Axis::fit(pts().map(|p| p.1), chart.scale, true);
    let xaxis = Axis::fit(pts().map(|p| p.0), Scale::Linear, true);
    y_axis(c, plot, &yaxis, &chart.y_label);
    let bottom = plot.y + plot.h;
    let xpx = |v: f64| plot.x + (xaxis.frac(v) * plot.w as f64).round() as i32;
    let ypx = |v: f64| bottom - (yaxis.frac(v) * plot.h as f64).round() as i32;
    for t in xaxis.ticks() {
        let px = xpx(t);
        c.fill_rect(px, plot.y, px, bottom - 1, GRID);
        c.fill_rect(px, bottom + 1, px, bottom + 4, AXIS);
        c.text_centered(px, bottom + 7, &fmt_num(t), 1, TEXT);
    }
    c.text_centered(plot.x + plot.w / 2, bottom + 20, &chart.x_label, 1, TEXT);
    axes_lines(c, plot);
    for (i, s) in chart.series.iter().enumerate() {
        let col = PALETTE[i % PALETTE.len()];
        let mut p: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| ok(*x) && ok(*y) && (chart.scale == Scale::Linear || *y > 0.0))
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in p.windows(2) {
            c.line(
                (xpx(w[0].0), ypx(w[0].1)),
                (xpx(w[1].0), ypx(w[1].1)),
                2,
                col,
            );
        }
        for (x, y) in p {
            let (px, py) = (xpx(x), ypx(y));
            c.fill_rect(px - 2, py - 2, px + 2, py + 2, col);
        }
    }
}

/// A bar chart as a PNG of `width`×`height` pixels.
pub fn bar_chart_png(chart: &BarChart, width: usize, height: usize) -> Vec<u8> {
    let mut c = Canvas::new(width, height, WHITE);
    let area = Area {
        x: 0,
        y: 0,
        w: width as i32,
        h: height as i32,
    };
    draw_bar_chart(&mut c, area, chart);
    c.to_png(Deflate::Runs)
}

/// A line chart as a PNG of `width`×`height` pixels.
pub fn line_chart_png(chart: &LineChart, width: usize, height: usize) -> Vec<u8> {
    let mut c = Canvas::new(width, height, WHITE);
    let area = Area {
        x: 0,
        y: 0,
        w: width as i32,
        h: height as i32,
    };
    draw_line_chart(&mut c, area, chart);
    c.to_png(Deflate::Runs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The chunks of a PNG file: (type, data), after checking the signature,
    /// the lengths and every CRC.
    pub(crate) fn chunks(png: &[u8]) -> Vec<([u8; 4], Vec<u8>)> {
        assert_eq!(&png[..8], &PNG_SIGNATURE, "signature");
        let mut out = Vec::new();
        let mut i = 8;
        while i < png.len() {
            let len = u32::from_be_bytes(png[i..i + 4].try_into().unwrap()) as usize;
            let kind: [u8; 4] = png[i + 4..i + 8].try_into().unwrap();
            let data = png[i + 8..i + 8 + len].to_vec();
            let crc = u32::from_be_bytes(png[i + 8 + len..i + 12 + len].try_into().unwrap());
            assert_eq!(crc, crc32(&png[i + 4..i + 8 + len]), "CRC of {kind:?}");
            out.push((kind, data));
            i += 12 + len;
        }
        assert_eq!(i, png.len());
        assert_eq!(&out[0].0, b"IHDR");
        assert_eq!(&out.last().unwrap().0, b"IEND");
        out
    }

    struct BitReader<'a> {
        data: &'a [u8],
        pos: usize,
    }

    impl BitReader<'_> {
        fn bit(&mut self) -> u32 {
            let b = (self.data[self.pos / 8] >> (self.pos % 8)) & 1;
            self.pos += 1;
            u32::from(b)
        }
        fn bits(&mut self, n: u32) -> u32 {
            (0..n).map(|i| self.bit() << i).sum()
        }
        /// A Huffman code of `n` more bits appended to `code` (MSB first).
        fn more(&mut self, mut code: u32, n: u32) -> u32 {
            for _ in 0..n {
                code = code << 1 | self.bit();
            }
            code
        }
    }

    /// Inflates a zlib stream of stored and fixed-Huffman blocks (what this
    /// encoder writes), checking the header and the Adler-32.
    pub(crate) fn inflate(z: &[u8]) -> Vec<u8> {
        assert_eq!(z[0] & 0x0F, 8, "deflate");
        assert_eq!((u32::from(z[0]) << 8 | u32::from(z[1])) % 31, 0, "FCHECK");
        let body = &z[2..z.len() - 4];
        let mut r = BitReader { data: body, pos: 0 };
        let mut out: Vec<u8> = Vec::new();
        loop {
            let last = r.bit();
            match r.bits(2) {
                0 => {
                    r.pos = r.pos.div_ceil(8) * 8;
                    let p = r.pos / 8;
                    let len = u16::from_le_bytes([body[p], body[p + 1]]);
                    let nlen = u16::from_le_bytes([body[p + 2], body[p + 3]]);
                    assert_eq!(len, !nlen);
                    out.extend_from_slice(&body[p + 4..p + 4 + len as usize]);
                    r.pos = (p + 4 + len as usize) * 8;
                }
                1 => loop {
                    let c7 = r.more(0, 7);
                    let sym = if c7 <= 23 {
                        256 + c7
                    } else {
                        let c8 = r.more(c7, 1);
                        match c8 {
                            0x30..=0xBF => c8 - 0x30,
                            0xC0..=0xC7 => 280 + c8 - 0xC0,
                            _ => 144 + r.more(c8, 1) - 0x190,
                        }
                    };
                    match sym {
                        0..=255 => out.push(sym as u8),
                        256 => break,
                        _ => {
                            let k = (sym - 257) as usize;
                            let len = LEN_BASE[k] + r.bits(LEN_EXTRA[k]);
                            let dcode = r.more(0, 5);
                            assert!(dcode < 4, "encoder only writes distances 1..=4");
                            let dist = dcode as usize + 1;
                            for _ in 0..len {
                                out.push(out[out.len() - dist]);
                            }
                        }
                    }
                },
                t => panic!("block type {t}"),
            }
            if last == 1 {
                break;
            }
        }
        let want = u32::from_be_bytes(z[z.len() - 4..].try_into().unwrap());
        assert_eq!(adler32(&out), want, "adler32");
        out
    }

    /// Decodes a PNG written by [`encode_png`] back to (width, height, rgb).
    pub(crate) fn decode(png: &[u8]) -> (usize, usize, Vec<u8>) {
        let ch = chunks(png);
        let ihdr = &ch[0].1;
        let w = u32::from_be_bytes(ihdr[0..4].try_into().unwrap()) as usize;
        let h = u32::from_be_bytes(ihdr[4..8].try_into().unwrap()) as usize;
        assert_eq!(&ihdr[8..], &[8, 2, 0, 0, 0]);
        let z: Vec<u8> = ch
            .iter()
            .filter(|c| &c.0 == b"IDAT")
            .flat_map(|c| c.1.iter().copied())
            .collect();
        let raw = inflate(&z);
        let stride = w * 3;
        assert_eq!(raw.len(), (stride + 1) * h);
        let mut rgb = vec![0u8; stride * h];
        for y in 0..h {
            let f = raw[y * (stride + 1)];
            for x in 0..stride {
                let v = raw[y * (stride + 1) + 1 + x];
                let a = if x >= 3 { rgb[y * stride + x - 3] } else { 0 };
                let b = if y > 0 { rgb[(y - 1) * stride + x] } else { 0 };
                rgb[y * stride + x] = match f {
                    0 => v,
                    1 => v.wrapping_add(a),
                    2 => v.wrapping_add(b),
                    _ => panic!("filter {f}"),
                };
            }
        }
        (w, h, rgb)
    }

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b""), 1);
        // Long input: the modulo is taken often enough.
        let big = vec![0xFFu8; 100_000];
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &big {
            a = (a + u64::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(adler32(&big), ((b << 16) | a) as u32);
    }

    fn sample_canvas(w: usize, h: usize) -> Canvas {
        let mut c = Canvas::new(w, h, WHITE);
        c.fill_rect(3, 4, 40, 30, PALETTE[0]);
        c.line((0, 0), (w as i32 - 1, h as i32 - 1), 2, PALETTE[3]);
        c.text(5, 40, "Strata 0.1 [x=y]", 1, BLACK);
        // Noise, so stored blocks span several 64 KiB blocks of varied bytes.
        let mut s = 0x1234_5678u32;
        for y in 60..h as i32 {
            for x in 0..w as i32 {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                if s.is_multiple_of(3) {
                    c.set(x, y, [s as u8, (s >> 8) as u8, (s >> 16) as u8]);
                }
            }
        }
        c
    }

    #[test]
    fn stored_png_round_trips() {
        let c = sample_canvas(150, 200); // 90,200 raw bytes: two stored blocks
        let png = c.to_png(Deflate::Stored);
        let ch = chunks(&png);
        let kinds: Vec<&[u8; 4]> = ch.iter().map(|c| &c.0).collect();
        assert_eq!(kinds, vec![b"IHDR", b"IDAT", b"IEND"]);
        let (w, h, rgb) = decode(&png);
        assert_eq!((w, h), (150, 200));
        assert_eq!(rgb, c.pixels());
    }

    #[test]
    fn run_coded_png_round_trips_and_is_small() {
        let c = sample_canvas(150, 200);
        let (w, h, rgb) = decode(&c.to_png(Deflate::Runs));
        assert_eq!((w, h), (150, 200));
        assert_eq!(rgb, c.pixels());
        let mut flat = Canvas::new(400, 300, WHITE);
        flat.fill_rect(50, 50, 300, 200, PALETTE[1]);
        let png = flat.to_png(Deflate::Runs);
        assert!(png.len() < 10_000, "{} bytes", png.len());
        assert_eq!(decode(&png).2, flat.pixels());
        // Degenerate sizes.
        for (w, h) in [(1, 1), (1, 5), (7, 1)] {
            let c = Canvas::new(w, h, PALETTE[2]);
            for d in [Deflate::Stored, Deflate::Runs] {
                assert_eq!(decode(&c.to_png(d)), (w, h, c.pixels().to_vec()));
            }
        }
    }

    #[test]
    fn text_draws_pixels_inside_its_box() {
        let mut c = Canvas::new(100, 20, WHITE);
        c.text(2, 2, "Ag9", 1, BLACK);
        let mut n = 0;
        for y in 0..20 {
            for x in 0..100 {
                if c.get(x, y) == Some(BLACK) {
                    n += 1;
                    assert!((2..2 + text_width("Ag9", 1) as usize).contains(&x));
                    assert!((2..10).contains(&y), "descender is one row below");
                }
            }
        }
        assert!(n > 20);
        assert_eq!(
            wrap("strata:next[delta=off]", 66),
            vec!["strata:next", "[delta=off]"]
        );
        assert_eq!(
            wrap("strata:next[delta=off]", 50),
            vec!["strata:", "next", "[delta=o", "ff]"]
        );
        assert_eq!(wrap("short", 60), vec!["short"]);
    }

    fn non_white(png: &[u8]) -> (usize, usize, usize, usize) {
        let (w, h, rgb) = decode(png);
        let colored = rgb
            .chunks(3)
            .filter(|p| p[0] != p[1] || p[1] != p[2])
            .count();
        let ink = rgb.chunks(3).filter(|p| *p != WHITE).count();
        (w, h, colored, ink)
    }

    #[test]
    fn bar_chart_renders() {
        let mut s0 = BarSeries::new("next", vec![Some(2.0), Some(12.7), Some(118.0)]);
        s0.markers = vec![Some(1.0), Some(10.0), Some(100.0)];
        s0.stacked = vec![Some(0.5), None, Some(40.0)];
        let s1 = BarSeries::new("memory", vec![Some(1.2), None, Some(107.0)]);
        for scale in [Scale::Log, Scale::Linear] {
            let chart = BarChart {
                title: "user_id: mean latency".into(),
                y_label: "ms".into(),
                groups: vec!["small".into(), "medium".into(), "large".into()],
                series: vec![s0.clone(), s1.clone()],
                scale,
                notes: vec!["black tick: physical minimum".into()],
            };
            let (w, h, colored, ink) = non_white(&bar_chart_png(&chart, 640, 360));
            assert_eq!((w, h), (640, 360));
            assert!(colored > 2000, "bars drawn: {colored}");
            assert!(ink > colored, "text and axes drawn");
        }
        // No data at all still gives a valid, framed image.
        let empty = BarChart {
            title: "empty".into(),
            y_label: String::new(),
            groups: Vec::new(),
            series: Vec::new(),
            scale: Scale::Log,
            notes: Vec::new(),
        };
        let (w, h, colored, ink) = non_white(&bar_chart_png(&empty, 200, 150));
        assert_eq!((w, h, colored), (200, 150, 0));
        assert!(ink > 0);
    }

    #[test]
    fn line_chart_renders() {
        let chart = LineChart {
            title: "mixed".into(),
            x_label: "operations".into(),
            y_label: "us".into(),
            series: vec![
                LineSeries {
                    name: "next".into(),
                    points: vec![(500.0, 30.0), (1000.0, 45.0), (1500.0, 41.0)],
                },
                LineSeries {
                    name: "memory".into(),
                    points: vec![(500.0, 20.0), (1000.0, f64::NAN), (1500.0, 60.0)],
                },
            ],
            scale: Scale::Linear,
        };
        let (w, h, colored, ink) = non_white(&line_chart_png(&chart, 500, 300));
        assert_eq!((w, h), (500, 300));
        assert!(colored > 300, "lines drawn: {colored}");
        assert!(ink > colored);
    }

    #[test]
    fn axes_and_numbers() {
        let a = Axis::fit([17.0, 18_000.0].into_iter(), Scale::Log, true);
        assert_eq!((a.lo, a.hi), (10.0, 100_000.0));
        assert_eq!(a.ticks(), vec![10.0, 100.0, 1000.0, 10_000.0, 100_000.0]);
        // A value on a power of ten still gets a bar: the axis starts a decade lower.
        let b = Axis::fit([10.0, 300.0].into_iter(), Scale::Log, true);
        assert_eq!((b.lo, b.hi), (1.0, 1000.0));
        assert!(b.frac(10.0) > 0.3);
        let l = Axis::fit([3.0, 97.0].into_iter(), Scale::Linear, true);
        assert_eq!((l.lo, l.hi), (0.0, 100.0));
        assert_eq!(l.ticks().len(), 6);
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(118.2), "118");
        assert_eq!(fmt_num(15_015.0), "15k");
        assert_eq!(fmt_num(2_000_000.0), "2M");
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
    }
}
