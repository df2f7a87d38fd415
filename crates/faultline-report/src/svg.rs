//! A minimal SVG writer for the report's plots. Every attribute value and every text node goes
//! through minijinja's HTML escaper, so names from results can never break the markup.

use minijinja::HtmlEscape;
use std::fmt::{Display, Write};

/// An SVG document under construction.
#[derive(Debug)]
pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

/// An attribute: a name and any displayable value.
pub type Attr<'a> = (&'a str, &'a dyn Display);

/// A number rounded for coordinates.
pub struct N(pub f64);

impl Display for N {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = if self.0.is_finite() { self.0 } else { 0.0 };
        write!(f, "{:.1}", v)
    }
}

impl Svg {
    /// An empty drawing of the given size in pixels.
    pub fn new(width: f64, height: f64) -> Svg {
        Svg {
            width,
            height,
            body: String::new(),
        }
    }

    fn attrs(&mut self, attrs: &[Attr]) {
        for (name, value) in attrs {
            let value = value.to_string();
            // Writing to a String cannot fail.
            let _ = write!(self.body, " {name}=\"{}\"", HtmlEscape(&value));
        }
    }

    /// Opens an element (close it with [`Svg::close`]).
    pub fn open(&mut self, tag: &str, attrs: &[Attr]) {
        self.body.push('<');
        self.body.push_str(tag);
        self.attrs(attrs);
        self.body.push('>');
    }

    /// Closes an element.
    pub fn close(&mut self, tag: &str) {
        let _ = write!(self.body, "</{tag}>");
    }

    /// An element without children.
    pub fn leaf(&mut self, tag: &str, attrs: &[Attr]) {
        self.body.push('<');
        self.body.push_str(tag);
        self.attrs(attrs);
        self.body.push_str("/>");
    }

    /// An element with a tooltip (`<title>`) as its only child.
    pub fn with_title(&mut self, tag: &str, attrs: &[Attr], title: &str) {
        self.open(tag, attrs);
        self.title(title);
        self.close(tag);
    }

    /// A `<title>` (the tooltip of the enclosing element).
    pub fn title(&mut self, text: &str) {
        let _ = write!(self.body, "<title>{}</title>", HtmlEscape(text));
    }

    /// A text node at `(x, y)`.
    pub fn text(&mut self, x: f64, y: f64, attrs: &[Attr], text: &str) {
        self.body.push_str("<text");
        self.attrs(&[("x", &N(x)), ("y", &N(y))]);
        self.attrs(attrs);
        let _ = write!(self.body, ">{}</text>", HtmlEscape(text));
    }

    /// A line segment.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, class: &str) {
        self.leaf(
            "line",
            &[
                ("x1", &N(x1)),
                ("y1", &N(y1)),
                ("x2", &N(x2)),
                ("y2", &N(y2)),
                ("class", &class),
            ],
        );
    }

    /// The finished document, with an id and an accessible title.
    pub fn finish(self, id: &str, label: &str) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"plot\" role=\"img\" aria-label=\"{}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">{}</svg>",
            HtmlEscape(id),
            HtmlEscape(label),
            N(self.width),
            N(self.height),
            N(self.width),
            N(self.height),
            self.body
        )
    }
}

/// A linear map from a data interval to a pixel interval.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Data interval.
    pub domain: (f64, f64),
    /// Pixel interval.
    pub range: (f64, f64),
}

impl Scale {
    /// The pixel position of `v`.
    pub fn at(&self, v: f64) -> f64 {
        let (d0, d1) = self.domain;
        let (r0, r1) = self.range;
        if d1 == d0 {
            return r0;
        }
        r0 + (v - d0) / (d1 - d0) * (r1 - r0)
    }

    /// About `n` round tick values inside the domain.
    pub fn ticks(&self, n: usize) -> Vec<f64> {
        let (lo, hi) = self.domain;
        let span = hi - lo;
        if span <= 0.0 || !span.is_finite() {
            return vec![lo];
        }
        let raw = span / n.max(1) as f64;
        let exponent = raw.log10().floor() as i32;
        let mag = 10f64.powi(exponent);
        let m = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .find(|m| m * mag >= raw)
            .unwrap_or(10.0);
        let step = m * mag;
        // i * m scaled by a power of ten, dividing for negative exponents so that round
        // values (0.6, not 0.6000000000000001) come out.
        let value = |i: i64| {
            if exponent < 0 {
                i as f64 * m / 10f64.powi(-exponent)
            } else {
                i as f64 * m * mag
            }
        };
        let first = (lo / step).ceil() as i64;
        let last = (hi / step).floor() as i64;
        (first..=last).map(value).collect()
    }
}

/// How an axis writes its tick values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A fraction as a percentage (`25%`).
    Percent,
    /// A difference of fractions in signed percentage points (`+2.5`).
    SignedPoints,
    /// Dollars, with at least cents (`$0.25`).
    Dollars,
    /// Token counts, in thousands once they reach a thousand (`1.5k`).
    Tokens,
    /// A plain number.
    Plain,
}

/// Labels for `ticks` with the fewest decimals that write every tick exactly, so that no two
/// ticks share a label (`2%`, `2%` for 2 and 2.5) and round ticks carry no noise (`20.0%`).
pub fn tick_labels(ticks: &[f64], unit: Unit) -> Vec<String> {
    let thousands = unit == Unit::Tokens && ticks.iter().any(|t| t.abs() >= 1000.0);
    let scaled = |t: f64| match unit {
        Unit::Percent | Unit::SignedPoints => 100.0 * t,
        Unit::Tokens if thousands => t / 1000.0,
        _ => t,
    };
    let write = |t: f64, d: usize| {
        let v = scaled(t);
        match unit {
            Unit::Percent => format!("{v:.d$}%"),
            Unit::SignedPoints => format!("{v:+.d$}"),
            Unit::Dollars => format!("${v:.0$}", d.max(2)),
            Unit::Tokens if thousands => format!("{v:.d$}k"),
            Unit::Tokens | Unit::Plain => format!("{v:.d$}"),
        }
    };
    const MOST_DECIMALS: usize = 6;
    let exact = |d: usize| {
        let f = 10f64.powi(d as i32);
        ticks.iter().all(|&t| {
            let v = scaled(t) * f;
            (v - v.round()).abs() < 1e-6 * f.max(1.0)
        })
    };
    let decimals = (0..MOST_DECIMALS)
        .find(|&d| {
            let labels: std::collections::BTreeSet<String> =
                ticks.iter().map(|&t| write(t, d)).collect();
            exact(d) && labels.len() == ticks.len()
        })
        .unwrap_or(MOST_DECIMALS);
    ticks.iter().map(|&t| write(t, decimals)).collect()
}

/// A colour for a score in `[0, 1]` on a perceptually even scale (viridis stops).
pub fn score_colour(v: f64) -> String {
    const STOPS: [(f64, [f64; 3]); 5] = [
        (0.0, [68.0, 1.0, 84.0]),
        (0.25, [59.0, 82.0, 139.0]),
        (0.5, [33.0, 145.0, 140.0]),
        (0.75, [94.0, 201.0, 98.0]),
        (1.0, [253.0, 231.0, 37.0]),
    ];
    let v = if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let i = STOPS.iter().rposition(|(p, _)| *p <= v).unwrap_or(0).min(3);
    let (p0, c0) = STOPS[i];
    let (p1, c1) = STOPS[i + 1];
    let t = (v - p0) / (p1 - p0);
    let c: Vec<u8> = (0..3)
        .map(|k| (c0[k] + t * (c1[k] - c0[k])).round() as u8)
        .collect();
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        let mut s = Svg::new(10.0, 10.0);
        s.text(1.0, 2.0, &[("class", &"a\"b")], "<script>&");
        s.with_title("rect", &[("width", &N(3.0))], "x<y");
        let out = s.finish("p<1>", "label");
        assert!(out.contains("&lt;script&gt;&amp;"), "{out}");
        assert!(out.contains("class=\"a&quot;b\""), "{out}");
        assert!(out.contains("<title>x&lt;y</title>"), "{out}");
        assert!(out.contains("id=\"p&lt;1&gt;\""), "{out}");
        assert!(!out.contains("<script>"));
    }

    #[test]
    fn scales_and_ticks() {
        let s = Scale {
            domain: (0.0, 1.0),
            range: (10.0, 110.0),
        };
        assert_eq!(s.at(0.5), 60.0);
        assert_eq!(s.ticks(5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        let flat = Scale {
            domain: (2.0, 2.0),
            range: (0.0, 5.0),
        };
        assert_eq!(flat.at(2.0), 0.0);
        assert_eq!(flat.ticks(4), vec![2.0]);
    }

    #[test]
    fn tick_labels_are_distinct_and_as_short_as_exact() {
        assert_eq!(
            tick_labels(&[0.0, 0.2, 0.4], Unit::Percent),
            ["0%", "20%", "40%"]
        );
        assert_eq!(
            tick_labels(&[0.0, 0.025, 0.05], Unit::Percent),
            ["0.0%", "2.5%", "5.0%"]
        );
        assert_eq!(
            tick_labels(&[-0.01, -0.005, 0.0, 0.005], Unit::SignedPoints),
            ["-1.0", "-0.5", "+0.0", "+0.5"]
        );
        assert_eq!(
            tick_labels(&[0.0, 0.001, 0.002], Unit::Dollars),
            ["$0.000", "$0.001", "$0.002"]
        );
        assert_eq!(
            tick_labels(&[1000.0, 1500.0, 2000.0], Unit::Tokens),
            ["1.0k", "1.5k", "2.0k"]
        );
        assert_eq!(tick_labels(&[0.0, 200.0], Unit::Tokens), ["0", "200"]);
        // Ticks from a real scale: every label distinct.
        let s = Scale {
            domain: (-0.013, 0.021),
            range: (0.0, 100.0),
        };
        let labels = tick_labels(&s.ticks(5), Unit::SignedPoints);
        let distinct: std::collections::BTreeSet<_> = labels.iter().collect();
        assert_eq!(distinct.len(), labels.len(), "{labels:?}");
    }

    #[test]
    fn colours_span_the_scale() {
        assert_eq!(score_colour(0.0), "#440154");
        assert_eq!(score_colour(1.0), "#fde725");
        assert_eq!(score_colour(f64::NAN), "#440154");
        assert_ne!(score_colour(0.4), score_colour(0.6));
    }
}
