//! A check run on untrusted PNG bytes before the `image` crate decodes them.
//!
//! The `png` crate (0.18.1, the newest release) accepts a `PLTE` chunk whose length is not a
//! whole number of RGB entries and then panics while expanding the palette
//! (image-rs/image-png#694; the fix is merged upstream but not released). Mask prompt files,
//! the CLI's frames and a ROS 2 peer's compressed images are all untrusted, so every decoder
//! here runs [`check_png_palette`] first: such a file becomes a decode error, not a crash.
//! Found by the `mask_png` fuzz target.

use std::io::{Read, Seek, SeekFrom};

/// The PNG signature (PNG 5.2).
const SIGNATURE: [u8; 8] = [137, 80, 78, 71, 13, 10, 26, 10];

/// Chunks looked at before giving up: a real file has its `PLTE` within a few chunks of the
/// start; a crafted one with millions of empty chunks must not make the check slow.
const MAX_CHUNKS: usize = 4096;

/// Returns why the PNG that `input` holds (from its current position) has a malformed
/// palette, or `Ok(())` when it has none, is well formed or is not a PNG at all (then the
/// decoder reports what is wrong). `input` is left where it was.
///
/// Only the chunks before the first `IDAT` are read: the palette must precede the image data
/// (PNG 5.6), and the decoder builds its palette table from what it read up to there.
pub fn check_png_palette<R: Read + Seek>(input: &mut R) -> std::io::Result<Result<(), String>> {
    let start = input.stream_position()?;
    let verdict = scan(input);
    input.seek(SeekFrom::Start(start))?;
    Ok(verdict)
}

/// [`check_png_palette`] on bytes in memory.
pub fn check_png_palette_bytes(bytes: &[u8]) -> Result<(), String> {
    scan(&mut std::io::Cursor::new(bytes))
}

fn scan<R: Read + Seek>(input: &mut R) -> Result<(), String> {
    let mut signature = [0u8; 8];
    if input.read_exact(&mut signature).is_err() || signature != SIGNATURE {
        return Ok(());
    }
    for _ in 0..MAX_CHUNKS {
        let mut header = [0u8; 8];
        if input.read_exact(&mut header).is_err() {
            // Truncated: the decoder says so.
            return Ok(());
        }
        let [l0, l1, l2, l3, t0, t1, t2, t3] = header;
        let length = u32::from_be_bytes([l0, l1, l2, l3]);
        match &[t0, t1, t2, t3] {
            b"PLTE" if length % 3 != 0 => {
                return Err(format!(
                    "malformed PNG: its PLTE chunk is {length} bytes, not a whole number of \
                     3-byte RGB entries"
                ));
            }
            b"IDAT" | b"IEND" => return Ok(()),
            _ => {}
        }
        // The chunk's data and its CRC.
        if input
            .seek(SeekFrom::Current(i64::from(length) + 4))
            .is_err()
        {
            return Ok(());
        }
    }
    Ok(())
}

/// A chunk's CRC-32 over its type and data (PNG 5.5), for tests that build or patch PNGs.
#[cfg(test)]
pub(crate) fn crc(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
        c
    })
}

/// A chunk with its CRC (PNG 5.5), so the real decoder takes it.
#[cfg(test)]
fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc(&out[4..]).to_be_bytes());
    out
}

/// A 1x1 8-bit indexed PNG whose one pixel is palette entry 0, with a `PLTE` chunk of
/// `palette_len` bytes (all 7).
#[cfg(test)]
pub(crate) fn indexed_png(palette_len: usize) -> Vec<u8> {
    let mut out = SIGNATURE.to_vec();
    out.extend(chunk(b"IHDR", &[0, 0, 0, 1, 0, 0, 0, 1, 8, 3, 0, 0, 0]));
    out.extend(chunk(b"tEXt", b"Comment\0x"));
    out.extend(chunk(b"PLTE", &vec![7; palette_len]));
    // zlib, one stored block of the row: filter 0, index 0; Adler-32 0x00020001.
    let zlib = [
        0x78, 0x01, 0x01, 0x02, 0x00, 0xfd, 0xff, 0, 0, 0x00, 0x02, 0x00, 0x01,
    ];
    out.extend(chunk(b"IDAT", &zlib));
    out.extend(chunk(b"IEND", &[]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palette_of_whole_entries_passes() {
        for len in [3, 6, 768] {
            assert_eq!(
                check_png_palette_bytes(&indexed_png(len)),
                Ok(()),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn palette_of_partial_entries_is_refused() {
        for len in [1, 2, 4, 5, 70, 767] {
            let e = check_png_palette_bytes(&indexed_png(len)).expect_err("refused");
            assert!(e.contains(&format!("PLTE chunk is {len} bytes")), "{e}");
        }
    }

    #[test]
    fn other_bytes_are_left_to_the_decoder() {
        assert_eq!(check_png_palette_bytes(b""), Ok(()));
        assert_eq!(check_png_palette_bytes(b"\xff\xd8\xff\xe0 a JPEG"), Ok(()));
        // Truncated inside a chunk header.
        assert_eq!(check_png_palette_bytes(&indexed_png(4)[..20]), Ok(()));
    }

    #[test]
    fn the_reader_is_left_where_it_was() {
        let mut bytes = vec![0u8; 5];
        bytes.extend(indexed_png(4));
        let mut cursor = std::io::Cursor::new(&bytes);
        cursor.set_position(5);
        let verdict = check_png_palette(&mut cursor).expect("seeks");
        assert!(verdict.is_err());
        assert_eq!(cursor.position(), 5);
    }
}
