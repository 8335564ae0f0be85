// Throughput and lag charts: polls /api/series (the console's history of the broker's /metrics) and
// draws it with uPlot. No data yet, or an error reading the endpoint, shows as a line of text.
(function () {
  "use strict";
  var status = document.getElementById("chart-status");
  var throughputBox = document.getElementById("throughput");
  var bytesBox = document.getElementById("bytes-chart");
  var lagBox = document.getElementById("lag-chart");
  var intervalMs = Math.max(1000, 1000 * parseFloat(throughputBox.getAttribute("data-interval") || "5"));
  var charts = {};

  function width(box) { return Math.max(300, box.clientWidth - 16); }

  function draw(key, box, title, names, times, columns) {
    var data = [times].concat(columns);
    var signature = names.join("\u0000");
    var chart = charts[key];
    if (chart && chart.signature === signature) {
      chart.plot.setData(data);
      return;
    }
    if (chart) { chart.plot.destroy(); }
    var palette = ["#2f5fd0", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2"];
    var series = [{}].concat(names.map(function (name, i) {
      return { label: name, stroke: palette[i % palette.length], width: 2 };
    }));
    var plot = new uPlot({ title: title, width: width(box), height: 280, series: series,
                           axes: [{}, { size: 70 }] }, data, box);
    charts[key] = { plot: plot, signature: signature };
  }

  function refresh() {
    fetch("/api/series", { headers: { "Accept": "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (s) {
        status.textContent = s.error ? s.error : (s.times.length ? "" : "waiting for two readings of the endpoint\u2026");
        if (!s.times.length) { return; }
        draw("throughput", throughputBox, "records per second", ["messages in"], s.times,
             [s.rates.messages_in]);
        draw("bytes", bytesBox, "bytes per second", ["bytes in", "bytes out"], s.times,
             [s.rates.bytes_in, s.rates.bytes_out]);
        var groups = Object.keys(s.lag);
        if (groups.length) {
          draw("lag", lagBox, "records behind", groups, s.times, groups.map(function (g) { return s.lag[g]; }));
        } else {
          if (charts.lag) { charts.lag.plot.destroy(); delete charts.lag; }
          lagBox.textContent = "no consumer lag in the endpoint's metrics (kafka_consumergroup_lag)";
        }
      })
      .catch(function (error) { status.textContent = "cannot load the series: " + error; });
  }

  refresh();
  setInterval(refresh, intervalMs);
})();
