package nodeload

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector turns the Sampler's current Load into metrics at scrape time,
// so a scrape never sees a half-updated sample. The gpu label is the device
// index: bounded by the hardware.
type collector struct {
	s *Sampler

	cpu, mem                                  *prometheus.Desc
	gpuUtil, gpuUsed, gpuTotal, gpuTemp, gpuW *prometheus.Desc
}

// Collector returns a prometheus.Collector of the Sampler's current Load,
// overrides included: vigil_node_cpu_utilization and
// vigil_node_memory_utilization (shares in [0,1]), and per device
// vigil_gpu_utilization, vigil_gpu_memory_used_bytes,
// vigil_gpu_memory_total_bytes, vigil_gpu_temperature_celsius and
// vigil_gpu_power_watts, labelled gpu="INDEX". Nothing is collected before
// the first sample.
func (s *Sampler) Collector() prometheus.Collector {
	gpu := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"gpu"}, nil)
	}
	return &collector{
		s:        s,
		cpu:      prometheus.NewDesc("vigil_node_cpu_utilization", "Share of CPU time spent busy over the last sampling interval, across all CPUs.", nil, nil),
		mem:      prometheus.NewDesc("vigil_node_memory_utilization", "Used share of memory: 1 - MemAvailable/MemTotal.", nil, nil),
		gpuUtil:  gpu("vigil_gpu_utilization", "Share of the last sample period during which a kernel ran on the GPU."),
		gpuUsed:  gpu("vigil_gpu_memory_used_bytes", "GPU memory in use."),
		gpuTotal: gpu("vigil_gpu_memory_total_bytes", "GPU memory installed."),
		gpuTemp:  gpu("vigil_gpu_temperature_celsius", "GPU core temperature."),
		gpuW:     gpu("vigil_gpu_power_watts", "GPU power draw."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpu, c.mem, c.gpuUtil, c.gpuUsed, c.gpuTotal, c.gpuTemp, c.gpuW} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	l := c.s.Load()
	if l.Time.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.GaugeValue, l.CPU)
	ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, l.Mem)
	for _, d := range l.GPUs {
		idx := strconv.Itoa(d.Index)
		ch <- prometheus.MustNewConstMetric(c.gpuUtil, prometheus.GaugeValue, d.Util, idx)
		ch <- prometheus.MustNewConstMetric(c.gpuUsed, prometheus.GaugeValue, d.MemUsed, idx)
		ch <- prometheus.MustNewConstMetric(c.gpuTotal, prometheus.GaugeValue, d.MemTotal, idx)
		ch <- prometheus.MustNewConstMetric(c.gpuTemp, prometheus.GaugeValue, d.TempC, idx)
		ch <- prometheus.MustNewConstMetric(c.gpuW, prometheus.GaugeValue, d.PowerW, idx)
	}
}
