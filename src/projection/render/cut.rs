//! Cutting to fit: the older context to its cap, and the prompt to the turn input limit.

use super::super::fingerprint::{decimal_digits, push_u64};
use super::{FRAME_HEAD, LINE_SNAP_WINDOW};

/// The byte offset of char number `n` (0-based) of `s`; `s.len()` when `s` has `n` chars or
/// fewer. Counts from whichever end is nearer.
pub(super) fn byte_offset_of_char(s: &str, n: usize) -> usize {
    if n >= s.len() {
        return s.len();
    }
    let total = s.chars().count();
    if n >= total {
        return s.len();
    }
    if n <= total / 2 {
        s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
    } else {
        let from_end = total - n;
        s.char_indices()
            .nth_back(from_end - 1)
            .map_or(0, |(i, _)| i)
    }
}

const OLDER_MARKER_HEAD: &str = "[truncated ";
const OLDER_MARKER_TAIL: &str = " chars from older context]\n";

pub(super) fn older_marker_chars(dropped: usize) -> usize {
    OLDER_MARKER_HEAD.len() + decimal_digits(dropped as u64) + OLDER_MARKER_TAIL.len()
}

pub(super) struct OlderCut {
    pub(super) dropped_chars: usize,
    /// Chars of the context after the cut, marker included.
    pub(super) kept_chars: usize,
}

/// Keeps the newest text of the context in `out` (after [`FRAME_HEAD`]) within `cap` chars,
/// marker included. `None` when not even the marker and one char fit (the caller drops the
/// context).
pub(super) fn cut_older_context(
    out: &mut String,
    context_chars: usize,
    cap: usize,
) -> Option<OlderCut> {
    let mut marker = older_marker_chars(context_chars - cap);
    let mut keep;
    let mut dropped;
    loop {
        if cap <= marker {
            return None;
        }
        keep = cap - marker;
        dropped = context_chars - keep;
        let needed = older_marker_chars(dropped);
        if needed <= marker {
            break;
        }
        marker = needed;
    }
    let context = &out[FRAME_HEAD.len()..];
    let mut cut = byte_offset_of_char(context, dropped);
    // Start on a non-blank line when one starts soon after the cut (the marker is its own
    // line). Skipping only shrinks the kept text, so the marker's possibly longer count still
    // fits: a count grows by at most as many digits as chars were skipped.
    let bytes = context.as_bytes();
    let window_end = context.len().min(cut + LINE_SNAP_WINDOW);
    let mut line_start = cut;
    if line_start > 0 && bytes[line_start - 1] != b'\n' {
        line_start = bytes[cut..window_end]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(cut, |pos| cut + pos + 1);
    }
    while line_start < window_end && bytes[line_start] == b'\n' {
        line_start += 1;
    }
    if line_start > cut && line_start < context.len() {
        // Everything skipped is ASCII newlines or a line's tail: count its chars.
        let skipped = context[cut..line_start].chars().count();
        dropped += skipped;
        keep -= skipped;
        cut = line_start;
    }
    let mut line = String::with_capacity(older_marker_chars(dropped));
    line.push_str(OLDER_MARKER_HEAD);
    push_u64(&mut line, dropped as u64);
    line.push_str(OLDER_MARKER_TAIL);
    let kept_chars = keep + line.len();
    out.replace_range(FRAME_HEAD.len()..FRAME_HEAD.len() + cut, &line);
    Some(OlderCut {
        dropped_chars: dropped,
        kept_chars,
    })
}

/// `…[truncated N chars]`.
pub(super) fn push_truncation_marker(out: &mut String, removed: usize) {
    out.push_str("…[truncated ");
    push_u64(out, removed as u64);
    out.push_str(" chars]");
}

pub(super) fn truncation_marker_chars(removed: usize) -> usize {
    "…[truncated ".chars().count() + decimal_digits(removed as u64) + " chars]".len()
}

/// Writes the prompt alone, cut to `limit` chars (head kept, marker at the end) when longer.
/// Returns how many chars were cut.
pub(super) fn push_fitted_prompt(
    out: &mut String,
    prompt: &str,
    prompt_chars: usize,
    limit: usize,
) -> usize {
    if prompt_chars <= limit {
        out.push_str(prompt);
        return 0;
    }
    let mut marker = truncation_marker_chars(prompt_chars - limit);
    loop {
        if limit <= marker {
            // Not even the marker fits: a hard cut at the limit.
            out.push_str(&prompt[..byte_offset_of_char(prompt, limit)]);
            return prompt_chars - limit;
        }
        let removed = prompt_chars - (limit - marker);
        let needed = truncation_marker_chars(removed);
        if needed <= marker {
            let keep = limit - marker;
            out.push_str(&prompt[..byte_offset_of_char(prompt, keep)]);
            push_truncation_marker(out, removed);
            return removed;
        }
        marker = needed;
    }
}
