//! The report as a picture: wall time per strategy, each bar coloured by
//! what its audit found.

use plotters::{
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use super::report::LabReport;

const CLEAN: RGBColor = RGBColor(46, 139, 87);
/// Clean, but buyers were refused while stock was left (version CAS
/// without retries).
const UNSOLD: RGBColor = RGBColor(230, 150, 20);
const BROKEN: RGBColor = RGBColor(200, 40, 40);

/// An SVG document of the strategies' wall times: green when the audit was
/// clean and the stock sold, amber when clean with stock left unsold, red
/// with its counts when the audit failed.
pub fn render_svg(report: &LabReport) -> anyhow::Result<String> {
    let runs = &report.strategies;
    anyhow::ensure!(!runs.is_empty(), "no strategy ran, nothing to draw");
    let mut svg = String::new();
    {
        let width = 160 + 120 * runs.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = runs.iter().map(|r| r.wall_ms as f64 / 1e3).fold(0.0, f64::max).max(0.01) * 1.25;
        let s = &report.scale;
        let caption = format!(
            "Strategy lab: {} buyers, stock {}, {} in flight (green: clean, amber: clean with stock unsold, red: broken)",
            s.users, s.stock, s.concurrency
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(70)
            .y_label_area_size(60)
            .build_cartesian_2d((0..runs.len() - 1).into_segmented(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc("wall time (s)")
            .x_labels(runs.len())
            .x_label_style(("sans-serif", 11))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => runs.get(*i).map(|r| r.name.to_owned()).unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        chart.draw_series(runs.iter().enumerate().map(|(i, r)| {
            let color = match (r.audit.clean(), r.audit.stock_left) {
                (false, _) => BROKEN,
                (true, 0) => CLEAN,
                (true, _) => UNSOLD,
            };
            let mut bar = Rectangle::new(
                [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), r.wall_ms as f64 / 1e3)],
                color.filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))?;
        chart.draw_series(runs.iter().enumerate().map(|(i, r)| {
            let wall = r.wall_ms as f64 / 1e3;
            let label = match (r.audit.clean(), r.audit.stock_left) {
                (false, _) => format!("{wall:.2} s, oversold {}, dup {}", r.audit.oversold, r.audit.duplicates),
                (true, 0) => format!("{wall:.2} s"),
                (true, left) => format!("{wall:.2} s, {left} unsold"),
            };
            let style = TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
            Text::new(label, (SegmentValue::CenterOf(i), wall + top * 0.01), style)
        }))?;
        root.present()?;
    }
    Ok(svg)
}
