//! The robustness curve as an SVG chart (plotters): VRA (or certified) percent against the
//! radius, one line per mode, and the baseline's lines dashed when there is one.

use plotters::prelude::*;

use crate::bounds::certify::Mode;
use crate::error::LipfpError;
use crate::gate::curve::CurveReport;

/// Chart size in pixels.
const SIZE: (u32, u32) = (800, 480);

/// Colours of the modes' lines, in `Mode::ALL` order.
const PALETTE: [RGBColor; Mode::ALL.len()] = [
    RGBColor(150, 150, 150),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(214, 39, 40),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
];

/// The (radius, percent) points of `mode` in `c`; radii that do not parse are skipped.
fn points(c: &CurveReport, mode: &str) -> Vec<(f64, f64)> {
    c.radii()
        .iter()
        .zip(c.series(mode))
        .filter_map(|(e, v)| e.parse::<f64>().ok().map(|x| (x, v)))
        .collect()
}

/// The SVG chart of gate `name`'s curve `c` (and `baseline`'s, dashed).
pub fn svg(
    name: &str,
    c: &CurveReport,
    baseline: Option<&CurveReport>,
) -> Result<String, LipfpError> {
    let fail = |e: String| LipfpError::Usage(format!("--plot: the chart could not be drawn: {e}"));
    let x_max = c
        .radii()
        .iter()
        .filter_map(|e| e.parse::<f64>().ok())
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let what = if c.shows_vra() {
        "VRA (%)"
    } else {
        "certified (%)"
    };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{name}: robustness curve"), ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..x_max, 0.0..100.0)
            .map_err(|e| fail(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("radius (l2)")
            .y_desc(what)
            .draw()
            .map_err(|e| fail(e.to_string()))?;
        for (k, mode) in Mode::ALL.iter().enumerate() {
            let colour = PALETTE[k];
            if c.modes.contains_key(mode.name()) {
                chart
                    .draw_series(LineSeries::new(
                        points(c, mode.name()),
                        colour.stroke_width(2),
                    ))
                    .map_err(|e| fail(e.to_string()))?
                    .label(mode.name())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
            }
            if let Some(b) = baseline.filter(|b| b.modes.contains_key(mode.name())) {
                let dashed = DashedLineSeries::new(points(b, mode.name()), 6, 4, colour.into());
                chart
                    .draw_series(dashed)
                    .map_err(|e| fail(e.to_string()))?
                    .label(format!("{} (baseline)", mode.name()))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| fail(e.to_string()))?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    Ok(out)
}
