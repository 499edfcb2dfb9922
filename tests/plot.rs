//! A horizontal bar chart as SVG text, written by hand: what the join benchmark draws its medians
//! with (`target/bench-runs/join/throughput.svg`).

use std::fmt::Write;

/// One bar: its label, its value (drawn to scale, negative or non-finite values as 0) and whether
/// it is drawn in [`HIGHLIGHT_COLOUR`] instead of [`BAR_COLOUR`].
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub highlight: bool,
}

pub const BAR_COLOUR: &str = "#4c78a8";
pub const HIGHLIGHT_COLOUR: &str = "#e45756";

const BAR_HEIGHT: f64 = 24.0;
const BAR_GAP: f64 = 10.0;
const TOP: f64 = 48.0;
/// Width of the bars at the axis' maximum.
const PLOT_WIDTH: f64 = 520.0;
/// Room right of the longest bar for its value.
const VALUE_ROOM: f64 = 80.0;
const MARGIN: f64 = 16.0;
/// Rough width of one character of a 13 px sans-serif label, to size the label column.
const CHAR_WIDTH: f64 = 7.5;
/// The same for the 15 px bold title.
const TITLE_CHAR_WIDTH: f64 = 9.0;

/// The bars in the given order, top to bottom, each labelled on its left and with its value
/// ([`si`]) at its end, on an axis from 0 in `unit` with a few round ticks; `title` above.
pub fn bar_chart_svg(title: &str, unit: &str, bars: &[Bar]) -> String {
    let value = |b: &Bar| {
        if b.value.is_finite() && b.value > 0.0 {
            b.value
        } else {
            0.0
        }
    };
    let longest = bars.iter().map(|b| b.label.chars().count()).max();
    let label_width = (longest.unwrap_or(0) as f64 * CHAR_WIDTH + MARGIN).max(100.0);
    let x0 = (MARGIN + label_width).round();
    let title_width = 2.0 * MARGIN + title.chars().count() as f64 * TITLE_CHAR_WIDTH;
    let width = (x0 + PLOT_WIDTH + VALUE_ROOM).max(title_width.round());
    let bars_bottom = TOP + bars.len().max(1) as f64 * (BAR_HEIGHT + BAR_GAP);
    let height = bars_bottom + 48.0;
    let max = bars.iter().map(value).fold(0.0, f64::max);
    let step = nice_step(max);
    let axis_max = if max > 0.0 {
        (max / step).ceil() * step
    } else {
        1.0
    };
    let scale = PLOT_WIDTH / axis_max;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(s, "<title>{}</title>", escape(title));
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{MARGIN}" y="26" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    // Ticks and grid lines, under the bars.
    let ticks = (axis_max / step).round() as usize;
    for i in 0..=ticks {
        let v = i as f64 * step;
        let x = x0 + v * scale;
        let _ = writeln!(
            s,
            r##"<line x1="{x:.2}" y1="{TOP:.0}" x2="{x:.2}" y2="{bars_bottom:.0}" stroke="#dddddd"/>"##
        );
        let _ = writeln!(
            s,
            r##"<text x="{x:.2}" y="{:.0}" text-anchor="middle" fill="#555555">{}</text>"##,
            bars_bottom + 16.0,
            si(v).replace(".0k", "k").replace(".00M", "M")
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.2}" y="{:.0}" text-anchor="middle" fill="#555555">{}</text>"##,
        x0 + PLOT_WIDTH / 2.0,
        bars_bottom + 36.0,
        escape(unit)
    );
    if bars.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="{x0:.0}" y="{:.0}">no data</text>"#,
            TOP + BAR_HEIGHT * 0.7
        );
    }
    for (i, b) in bars.iter().enumerate() {
        let y = TOP + BAR_GAP / 2.0 + i as f64 * (BAR_HEIGHT + BAR_GAP);
        let w = value(b) * scale;
        let text_y = y + BAR_HEIGHT * 0.7;
        let fill = if b.highlight {
            HIGHLIGHT_COLOUR
        } else {
            BAR_COLOUR
        };
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="{text_y:.2}" text-anchor="end">{}</text>"#,
            x0 - 8.0,
            escape(&b.label)
        );
        let _ = writeln!(
            s,
            r#"<rect class="bar" x="{x0:.0}" y="{y:.2}" width="{w:.2}" height="{BAR_HEIGHT:.0}" fill="{fill}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.2}" y="{text_y:.2}">{}</text>"#,
            x0 + w + 6.0,
            si(b.value)
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{x0:.0}" y1="{TOP:.0}" x2="{x0:.0}" y2="{bars_bottom:.0}" stroke="black"/>"#
    );
    s.push_str("</svg>\n");
    s
}

/// `value` in three or four significant figures with a k, M or G suffix: 950, 84.0k, 1.25M.
pub fn si(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_owned();
    }
    let a = value.abs();
    // Each unit from where its rounded form would no longer fit the smaller one (999.96k is 1.00M).
    if a < 999.5 {
        format!("{value:.0}")
    } else if a < 999_950.0 {
        format!("{:.1}k", value / 1e3)
    } else if a < 999_995_000.0 {
        format!("{:.2}M", value / 1e6)
    } else {
        format!("{:.2}G", value / 1e9)
    }
}

/// `text` with the characters XML gives a meaning replaced by their entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about five ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(label: &str, value: f64, highlight: bool) -> Bar {
        Bar {
            label: label.to_owned(),
            value,
            highlight,
        }
    }

    /// The join benchmark's kind of input, with a label XML would misread.
    fn sample() -> Vec<Bar> {
        vec![
            bar("bare consumer (the limit)", 164_700.0, true),
            bar("cojoin-noop", 160_274.0, false),
            bar("cojoin-rust", 130_003.0, false),
            bar("cojoin-python", 68_944.0, false),
            bar("cojoin-js", 48_071.0, false),
            bar("python <handwritten> & co", 104_210.0, false),
        ]
    }

    /// Every `<tag …>` of `svg` as (name, attributes text, self-closing), closing tags as "/name".
    fn tags(svg: &str) -> Vec<(String, String, bool)> {
        let mut out = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("an unclosed tag") + start;
            let inner = &rest[start + 1..end];
            let self_closing = inner.ends_with('/');
            let inner = inner.trim_end_matches('/');
            let (name, attrs) = inner.split_once(' ').unwrap_or((inner, ""));
            out.push((name.to_owned(), attrs.to_owned(), self_closing));
            rest = &rest[end + 1..];
        }
        out
    }

    fn attr(attrs: &str, name: &str) -> Option<String> {
        let start = attrs
            .find(&format!(" {name}=\""))
            .map(|i| i + 1)
            .or_else(|| attrs.starts_with(&format!("{name}=\"")).then_some(0))?
            + name.len()
            + 2;
        let len = attrs[start..].find('"')?;
        Some(attrs[start..start + len].to_owned())
    }

    /// The bar rectangles' (width, fill), top to bottom.
    fn bar_rects(svg: &str) -> Vec<(f64, String)> {
        tags(svg)
            .into_iter()
            .filter(|(name, attrs, _)| name == "rect" && attrs.contains("class=\"bar\""))
            .map(|(_, attrs, _)| {
                (
                    attr(&attrs, "width").unwrap().parse().unwrap(),
                    attr(&attrs, "fill").unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn is_well_formed_svg() {
        let svg = bar_chart_svg("join <throughput> & more", "records/s", &sample());
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        // Tags nest and close.
        let mut open = Vec::new();
        for (name, _, self_closing) in tags(&svg) {
            if let Some(closed) = name.strip_prefix('/') {
                assert_eq!(
                    open.pop().as_deref(),
                    Some(closed),
                    "</{closed}> closes nothing"
                );
            } else if !self_closing {
                open.push(name);
            }
        }
        assert!(open.is_empty(), "left open: {open:?}");
        // Every & starts an entity; no < or > is left in text.
        for (i, _) in svg.match_indices('&') {
            let entity = &svg[i..svg[i..].find(';').unwrap() + i + 1];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity),
                "{entity}"
            );
        }
        assert!(svg.contains(">join &lt;throughput&gt; &amp; more</text>"));
    }

    #[test]
    fn every_label_appears_escaped() {
        let bars = sample();
        let svg = bar_chart_svg("t", "records/s", &bars);
        for b in &bars {
            assert!(
                svg.contains(&format!(">{}</text>", escape(&b.label))),
                "{}",
                b.label
            );
        }
        assert!(svg.contains(">python &lt;handwritten&gt; &amp; co</text>"));
        assert!(!svg.contains("<handwritten>"));
        assert!(svg.contains(">records/s</text>"));
    }

    #[test]
    fn bar_widths_are_proportional_to_values() {
        let bars = sample();
        let rects = bar_rects(&bar_chart_svg("t", "records/s", &bars));
        assert_eq!(rects.len(), bars.len());
        let (w0, v0) = (rects[0].0, bars[0].value);
        assert!(w0 > 100.0);
        for (b, (w, _)) in bars.iter().zip(&rects) {
            let (expected, got) = (b.value / v0, w / w0);
            assert!(
                (expected - got).abs() < 1e-3,
                "{}: {got} of the first bar, expected {expected}",
                b.label
            );
        }
        // The largest bar ends within the plot, and no bar goes past it.
        assert!(rects.iter().all(|(w, _)| *w <= PLOT_WIDTH + 1e-9));
    }

    #[test]
    fn highlighted_bar_has_the_highlight_colour() {
        let rects = bar_rects(&bar_chart_svg("t", "records/s", &sample()));
        assert_eq!(rects[0].1, HIGHLIGHT_COLOUR);
        assert!(rects[1..].iter().all(|(_, fill)| fill == BAR_COLOUR));
        assert_ne!(HIGHLIGHT_COLOUR, BAR_COLOUR);
    }

    #[test]
    fn values_are_printed_at_the_bars() {
        let svg = bar_chart_svg("t", "records/s", &sample());
        for v in ["164.7k", "160.3k", "130.0k", "68.9k", "48.1k", "104.2k"] {
            assert!(svg.contains(&format!(">{v}</text>")), "{v}");
        }
    }

    #[test]
    fn odd_values_and_no_bars_still_draw() {
        let svg = bar_chart_svg(
            "t",
            "u",
            &[
                bar("zero", 0.0, false),
                bar("nan", f64::NAN, false),
                bar("neg", -5.0, false),
            ],
        );
        assert!(bar_rects(&svg).iter().all(|(w, _)| *w == 0.0));
        let empty = bar_chart_svg("t", "u", &[]);
        assert!(empty.starts_with("<svg") && empty.contains(">no data</text>"));
        assert!(bar_rects(&empty).is_empty());
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(950.0), "950");
        assert_eq!(si(84_000.0), "84.0k");
        assert_eq!(si(999_960.0), "1.00M");
        assert_eq!(si(1_250_000.0), "1.25M");
        assert_eq!(si(2.5e9), "2.50G");
        assert_eq!(si(f64::NAN), "n/a");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(164_700.0), 50_000.0);
        assert_eq!(nice_step(10.0), 2.0);
        assert_eq!(nice_step(0.0), 1.0);
        // The sample's axis: 0 to 200k in steps of 50k.
        let svg = bar_chart_svg("t", "records/s", &sample());
        for tick in ["0", "50k", "100k", "150k", "200k"] {
            assert!(svg.contains(&format!(">{tick}</text>")), "{tick}");
        }
    }
}
