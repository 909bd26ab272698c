//! The live view's GPU charts: per GPU, each NVML counter track's series (from the sampler's
//! [`GpuFeed`]), and each traced process's CUDA device memory (the CUDA family's account, read
//! at every snapshot), as time series the page draws. Bounded: one point per series per second
//! (the newest reading of that second) over the last five minutes.
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::cuda::nvml::{GpuFeed, Reading};

/// The stretch of time the charts keep.
const KEPT_S: f64 = 300.0;

/// One series' points: (seconds since the capture began, value).
#[derive(Debug, Default)]
pub struct Points(VecDeque<(f64, f64)>);

impl Points {
    /// Adds a point; one in the same second as the newest replaces it.
    pub fn add(&mut self, t_s: f64, value: f64) {
        match self.0.back_mut() {
            Some(last) if last.0.floor() == t_s.floor() => *last = (t_s, value),
            _ => self.0.push_back((t_s, value)),
        }
        while self.0.front().is_some_and(|(t, _)| *t < t_s - KEPT_S) {
            self.0.pop_front();
        }
    }
}

impl Serialize for Points {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|(t, v)| [(t * 1000.0).round() / 1000.0, *v]))
    }
}

/// One chart: a counter track and its series.
#[derive(Debug, Default, Serialize)]
pub struct Chart {
    pub track: String,
    pub series: BTreeMap<String, Points>,
}

/// One GPU's charts, in the order their tracks first came.
#[derive(Debug, Serialize)]
pub struct GpuCharts {
    pub index: u32,
    pub name: String,
    pub charts: Vec<Chart>,
}

impl GpuCharts {
    pub fn new(index: u32, name: String) -> Self {
        GpuCharts {
            index,
            name,
            charts: Vec::new(),
        }
    }

    /// The chart of `track`, made when first asked for.
    pub fn chart(&mut self, track: &str) -> &mut Chart {
        let at = match self.charts.iter().position(|c| c.track == track) {
            Some(at) => at,
            None => {
                self.charts.push(Chart {
                    track: track.to_string(),
                    ..Default::default()
                });
                self.charts.len() - 1
            }
        };
        &mut self.charts[at]
    }

    fn add(&mut self, reading: &Reading, t_s: f64) {
        let chart = self.chart(reading.track);
        for (series, value) in &reading.values {
            chart.series.entry(series.clone()).or_default().add(t_s, *value);
        }
    }
}

/// The charts the snapshots carry.
#[derive(Debug, Default, Serialize)]
pub struct Charts {
    pub gpus: Vec<GpuCharts>,
    /// CUDA device memory per process: one series per `pid N`.
    pub cuda_memory: BTreeMap<String, Points>,
}

/// The recording loop's side of the charts.
pub struct ChartFeed {
    feed: Option<GpuFeed>,
    pub charts: Charts,
    begin_ns: u64,
}

impl ChartFeed {
    pub fn new(begin_ns: u64) -> Self {
        ChartFeed {
            feed: None,
            charts: Charts::default(),
            begin_ns,
        }
    }

    /// Shows the GPU metrics `feed` hands over.
    pub fn show_gpus(&mut self, feed: GpuFeed) {
        self.feed = Some(feed);
    }

    fn seconds(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.begin_ns) as f64 / 1e9
    }

    /// Takes the readings since the last call, and the CUDA memory of each process now.
    pub fn update(&mut self, now_ns: u64, cuda_memory: &[(u32, u64)]) {
        if let Some(feed) = &self.feed {
            let crate::cuda::nvml::Taken { gpus, readings } = feed.take();
            for (index, name) in gpus {
                if !self.charts.gpus.iter().any(|g| g.index == index) {
                    self.charts.gpus.push(GpuCharts::new(index, name));
                }
            }
            for (index, reading) in readings {
                let t_s = self.seconds(reading.ts_ns);
                if let Some(gpu) = self.charts.gpus.iter_mut().find(|g| g.index == index) {
                    gpu.add(&reading, t_s);
                }
            }
        }
        let t_s = self.seconds(now_ns);
        for (pid, bytes) in cuda_memory {
            self.charts
                .cuda_memory
                .entry(format!("pid {pid}"))
                .or_default()
                .add(t_s, *bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_point_a_second_the_newest_over_five_minutes() {
        let mut points = Points::default();
        for (t, v) in [(0.1, 1.0), (0.9, 2.0), (1.2, 3.0), (300.5, 4.0)] {
            points.add(t, v);
        }
        let json = |p: &Points| serde_json::to_string(p).unwrap();
        assert_eq!(json(&points), "[[0.9,2.0],[1.2,3.0],[300.5,4.0]]");
        points.add(302.0, 5.0);
        assert_eq!(json(&points), "[[300.5,4.0],[302.0,5.0]]");
    }

    #[test]
    fn readings_become_charts_of_their_gpu() {
        let feed = GpuFeed::default();
        let mut charts = ChartFeed::new(1_000_000_000);
        charts.show_gpus(feed.clone());
        feed.started(vec![(0, "GPU0".into())]);
        feed.push(
            0,
            &[Reading {
                ts_ns: 3_500_000_000,
                track: "power (W)",
                values: vec![("power".into(), 120.5)],
            }],
        );
        charts.update(4_000_000_000, &[(42, 4096)]);
        let json = serde_json::to_value(&charts.charts).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "gpus": [{"index": 0, "name": "GPU0", "charts": [
                    {"track": "power (W)", "series": {"power": [[2.5, 120.5]]}}
                ]}],
                "cuda_memory": {"pid 42": [[3.0, 4096.0]]},
            })
        );
    }
}
