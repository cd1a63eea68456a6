"use strict";
// Small SVG line charts for the console: the broker's recent samples, one line per series.
// Everything is drawn with DOM calls (no markup strings), so no data can inject markup.

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_POINTS = 200; // the broker keeps 10 minutes of samples, one every 3 s

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

class LineChart {
  // series: [{key, label, color}]; format: value -> text.
  constructor(id, title, series, format) {
    this.series = series;
    this.format = format;
    this.samples = [];
    this.root = document.createElement("div");
    this.root.className = "chart";
    this.root.id = id;
    this.legend = document.createElement("div");
    this.legend.className = "title";
    const heading = document.createElement("strong");
    heading.textContent = title;
    this.legend.append(heading);
    this.values = {};
    for (const s of series) {
      const item = document.createElement("span");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = s.color;
      const value = document.createElement("span");
      value.className = "value";
      value.dataset.series = s.key;
      item.append(swatch, s.label + ": ", value);
      this.legend.append(item);
      this.values[s.key] = value;
    }
    this.svg = svg("svg", {viewBox: "0 0 600 160", preserveAspectRatio: "none", role: "img"});
    this.root.append(this.legend, this.svg);
    this.root.dataset.points = "0";
  }

  // samples: [{time: ms, key: value, ...}], oldest first (the last CHART_POINTS are drawn).
  show(samples) {
    this.samples = samples.slice(-CHART_POINTS);
    this.render();
  }

  render() {
    const last = this.samples[this.samples.length - 1] || {};
    for (const s of this.series) {
      const v = Number(last[s.key] || 0);
      this.values[s.key].textContent = this.format(v);
      this.root.dataset["last" + s.key[0].toUpperCase() + s.key.slice(1)] = String(v);
    }
    this.root.dataset.points = String(this.samples.length);
    this.root.dataset.lastTime = String(last.time || 0);
    const top = Math.max(1e-9, ...this.samples.flatMap(p => this.series.map(s => Number(p[s.key] || 0))));
    const scale = top * 1.1;
    const width = 600, height = 160, left = 4, bottom = 14;
    this.svg.replaceChildren();
    for (const f of [0.25, 0.5, 0.75, 1]) {
      const y = (height - bottom) * (1 - f / 1.1);
      this.svg.append(svg("line", {class: "grid", x1: 0, x2: width, y1: y, y2: y}));
    }
    const label = svg("text", {class: "axis", x: width - 4, y: 10, "text-anchor": "end"});
    label.textContent = "max " + this.format(top);
    this.svg.append(label);
    const step = (width - left) / (CHART_POINTS - 1);
    const offset = CHART_POINTS - this.samples.length;
    for (const s of this.series) {
      const points = this.samples.map((p, i) => {
        const x = left + (offset + i) * step;
        const y = (height - bottom) * (1 - Number(p[s.key] || 0) / scale);
        return x.toFixed(1) + "," + y.toFixed(1);
      });
      this.svg.append(svg("polyline", {points: points.join(" "), fill: "none", stroke: s.color,
                                       "stroke-width": 2, "data-series": s.key}));
    }
    const now = svg("text", {class: "axis", x: width - 4, y: height - 2, "text-anchor": "end"});
    now.textContent = "now";
    this.svg.append(now);
  }
}
