//! File-name helpers shared by the CLI and the examples.

use std::cmp::Ordering;

/// Splits a name into runs of ASCII digits and runs of other characters.
fn chunks(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut digits = None;
    for (i, c) in s.char_indices() {
        let d = c.is_ascii_digit();
        if digits.is_some_and(|prev| prev != d) {
            out.push(&s[start..i]);
            start = i;
        }
        digits = Some(d);
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Natural order: digit runs compare as numbers (`frame2 < frame10`), the rest as text; ties
/// (`frame01` vs `frame1`) fall back to plain text order.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(&cb) {
        let numeric = |s: &str| s.starts_with(|c: char| c.is_ascii_digit());
        let ord = if numeric(x) && numeric(y) {
            let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        } else {
            x.cmp(y)
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut names = vec![
            "frame10.png",
            "frame2.png",
            "frame1.png",
            "a.png",
            "frame02.png",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "a.png",
                "frame1.png",
                "frame02.png",
                "frame2.png",
                "frame10.png"
            ]
        );
    }
}
