//! The one rough token estimate ctxbridge makes where an engine gave none it can trust: four
//! characters to a token. The harness compares it with `tokenBudget` before a pre-assembly
//! compaction, the stdio engine protocol fills `estimatedTokens` with it (rounded up), and the
//! sample and bench engines report it (rounded down).

/// Characters per token in the estimate.
pub const CHARS_PER_TOKEN: usize = 4;

/// The estimated tokens of `chars` characters of text, unrounded.
pub fn estimate_tokens(chars: usize) -> f64 {
    chars as f64 / CHARS_PER_TOKEN as f64
}

#[cfg(test)]
mod tests {
    use super::estimate_tokens;

    #[test]
    fn four_characters_make_a_token() {
        assert_eq!(estimate_tokens(0), 0.0);
        assert_eq!(estimate_tokens(8), 2.0);
        assert_eq!(estimate_tokens(9), 2.25);
        assert_eq!(estimate_tokens(9).ceil() as u64, 9_usize.div_ceil(4) as u64);
        assert_eq!(estimate_tokens(9).floor(), (9 / 4) as f64);
    }
}
