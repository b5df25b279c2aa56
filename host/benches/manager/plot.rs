//! A small SVG line chart, written by hand: panels side by side, one line
//! per series, linear axes from zero. Text is SVG `<text>`, so nothing needs
//! fonts at build time (the viewer picks a sans-serif font).

use std::fmt::Write as _;

pub struct Series {
    pub label: String,
    pub color: &'static str,
    /// (x, y), x ascending.
    pub points: Vec<(f64, f64)>,
}

pub struct Panel {
    pub title: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const PANEL_W: f64 = 460.0;
const PANEL_H: f64 = 340.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 110.0;

/// Round tick positions from 0 to at least `max`.
fn ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 && max.is_finite() { max } else { 1.0 };
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(magnitude * 10.0);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

fn label(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1000.0 && v % 1000.0 == 0.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The chart: `title` on top, the panels in a row sharing `x_label`, the
/// legend (from the first panel's series) and `note` below.
pub fn svg(title: &str, x_label: &str, panels: &[Panel], note: &str) -> String {
    let width = LEFT + panels.len() as f64 * (PANEL_W + LEFT) + RIGHT;
    let height = TOP + PANEL_H + BOTTOM;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.0}" y="24" font-size="16" text-anchor="middle" font-weight="bold">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    let x_max = panels.iter().flat_map(|p| &p.series).flat_map(|s| &s.points).map(|p| p.0).fold(0.0, f64::max);
    let xt = ticks(x_max);
    for (i, panel) in panels.iter().enumerate() {
        let x0 = LEFT + i as f64 * (PANEL_W + LEFT);
        let y0 = TOP + PANEL_H;
        let y_max = panel.series.iter().flat_map(|s| &s.points).map(|p| p.1).fold(0.0, f64::max);
        let yt = ticks(y_max);
        let (xm, ym) = (*xt.last().unwrap_or(&1.0), *yt.last().unwrap_or(&1.0));
        let px = |x: f64| x0 + x / xm * PANEL_W;
        let py = |y: f64| y0 - y / ym * PANEL_H;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="14" text-anchor="middle">{}</text>"#,
            x0 + PANEL_W / 2.0,
            TOP - 12.0,
            escape(&panel.title)
        );
        for &t in &yt {
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 + PANEL_W,
                x0 - 6.0,
                py(t) + 4.0,
                label(t),
                y = py(t)
            );
        }
        for &t in &xt {
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e0e0e0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP,
                y0,
                y0 + 18.0,
                label(t),
                x = px(t)
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.1}" y="{TOP:.1}" width="{PANEL_W:.1}" height="{PANEL_H:.1}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x0 + PANEL_W / 2.0,
            y0 + 38.0,
            escape(x_label)
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            x0 - 48.0,
            TOP + PANEL_H / 2.0,
            escape(&panel.y_label)
        );
        for series in &panel.series {
            let path: Vec<String> = series.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
            if path.len() > 1 {
                let _ = writeln!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
                    path.join(" "),
                    series.color
                );
            }
            for &(x, y) in &series.points {
                let value = label((y * 10.0).round() / 10.0);
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"><title>{}: {value} at {}</title></circle>"#,
                    px(x),
                    py(y),
                    series.color,
                    escape(&series.label),
                    label(x)
                );
                // The value beside the point, left of it at the right edge.
                let anchor = if px(x) > x0 + PANEL_W - 60.0 { "end" } else { "start" };
                let dx = if anchor == "end" { -7.0 } else { 7.0 };
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{}" text-anchor="{anchor}">{value}</text>"#,
                    px(x) + dx,
                    py(y) - 5.0,
                    series.color
                );
            }
        }
    }
    // Legend.
    let mut lx = LEFT;
    let ly = TOP + PANEL_H + 62.0;
    for series in panels.first().map(|p| p.series.as_slice()).unwrap_or_default() {
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 24.0,
            series.color,
            lx + 30.0,
            ly + 4.0,
            escape(&series.label)
        );
        lx += 40.0 + 7.0 * series.label.len() as f64;
    }
    let _ = writeln!(s, r##"<text x="{LEFT:.1}" y="{:.1}" fill="#555">{}</text>"##, ly + 28.0, escape(note));
    s.push_str("</svg>\n");
    s
}
