//! What the element's measuring examples share: their synthetic frames and the `WxH` argument.
//! Each example takes it with `mod common;`.

/// A synthetic `w x h` RGB frame `t` of a clip: a block drifting right over a textured
/// background, so tracking has something to follow at any size.
pub fn frame(t: usize, w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let inside = (x as i64 - (w / 3 + 4 * t) as i64).abs() < (w / 10) as i64
                && (y as i64 - (h / 2) as i64).abs() < (h / 8) as i64;
            let base = ((x * 7 + y * 3 + t * 5) % 64) as u8;
            v.extend_from_slice(&if inside {
                [200, 60 + base, 40]
            } else {
                [base, 90, 120 + base]
            });
        }
    }
    v
}

/// The frame size of a `WxH` argument (e.g. `640x360`); `default` when it is absent or not
/// of that form.
pub fn size_arg(arg: Option<&String>, default: (usize, usize)) -> (usize, usize) {
    arg.and_then(|s| s.split_once('x'))
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .unwrap_or(default)
}
