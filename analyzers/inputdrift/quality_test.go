package inputdrift

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// promptGen makes chat request bodies: a word count drawn from a normal
// distribution and a language drawn from a mix.
type promptGen struct {
	rng        *rand.Rand
	meanWords  float64
	sdWords    float64
	mix        map[string]float64 // language → share
	languages  []string
	maxTokens  []int
	systemRate float64
}

var vocab = map[string][]string{
	"en": strings.Fields("the system report user error latency model request answer summarise explain write list compare data table value code test deploy service cluster node memory"),
	"es": strings.Fields("el sistema informe usuario error latencia modelo petición respuesta resumir explicar escribir lista comparar datos tabla valor código prueba servicio nodo memoria"),
	"zh": strings.Fields("系统 报告 用户 错误 延迟 模型 请求 回答 总结 解释 写 列表 比较 数据 表格 数值 代码 测试 部署 服务 集群 节点 内存"),
	"ru": strings.Fields("система отчёт пользователь ошибка задержка модель запрос ответ кратко объясни напиши список сравни данные таблица значение код тест сервис узел память"),
}

func newGen(seed uint64, mean, sd float64, mix map[string]float64) *promptGen {
	g := &promptGen{rng: rand.New(rand.NewPCG(seed, 7)), meanWords: mean, sdWords: sd, mix: mix,
		maxTokens: []int{128, 256, 512}, systemRate: 0.3}
	for _, l := range []string{"en", "es", "zh", "ru"} {
		if mix[l] > 0 {
			g.languages = append(g.languages, l)
		}
	}
	return g
}

func (g *promptGen) language() string {
	u := g.rng.Float64()
	for _, l := range g.languages {
		if u < g.mix[l] {
			return l
		}
		u -= g.mix[l]
	}
	return g.languages[len(g.languages)-1]
}

func (g *promptGen) body() []byte {
	words := max(3, int(g.meanWords+g.sdWords*g.rng.NormFloat64()))
	lang := g.language()
	v := vocab[lang]
	var sb strings.Builder
	for i := range words {
		if i > 0 && lang != "zh" {
			sb.WriteByte(' ')
		}
		sb.WriteString(v[g.rng.IntN(len(v))])
		if g.rng.IntN(12) == 0 {
			sb.WriteString(", " + strconv.Itoa(g.rng.IntN(1000)))
		}
	}
	sb.WriteByte('.')
	msgs := fmt.Sprintf(`{"role":"user","content":%q}`, sb.String())
	if g.rng.Float64() < g.systemRate {
		msgs = `{"role":"system","content":"You are a helpful assistant."},` + msgs
	}
	return fmt.Appendf(nil, `{"model":"m","messages":[%s],"max_tokens":%d,"temperature":0.7}`,
		msgs, g.maxTokens[g.rng.IntN(len(g.maxTokens))])
}

// run feeds n prompts at rate per second from t, evaluating every interval,
// and returns the time after the last prompt, the indexes (counted from the
// first prompt of this run) at which the state turned to drift, and the
// number of evaluations.
func run(t *testing.T, m *Monitor, g *promptGen, start time.Time, n int, rate float64, every time.Duration, stopAtAlarm bool) (time.Time, []int, int) {
	t.Helper()
	step := time.Duration(float64(time.Second) / rate)
	now := start
	next := start.Add(every)
	var alarms []int
	evals := 0
	inDrift := m.Last().State == StateDrift
	for i := range n {
		f, err := Extract(g.body())
		if err != nil {
			t.Fatal(err)
		}
		m.Add(now, &f)
		now = now.Add(step)
		if !now.Before(next) {
			r := m.Evaluate(now)
			evals++
			if r.State == StateDrift && !inDrift {
				alarms = append(alarms, i+1)
				if stopAtAlarm {
					return now, alarms, evals
				}
			}
			inDrift = r.State == StateDrift
			next = next.Add(every)
		}
	}
	return now, alarms, evals
}

// TestDetectionQuality measures the input-drift targets: 10,000 stationary
// requests raise no drift; a +0.5σ shift in prompt length, and separately a
// change of language mix, are flagged within 500 requests of the change.
// Prompts arrive at 5/s of simulated time with the default configuration.
// The seeds are fixed, so the figures are reproducible; they are logged
// with -v.
func TestDetectionQuality(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	const rate = 5.0
	cfg := config.Default().Analyzers
	stationary := map[string]float64{"en": 0.9, "es": 0.1}
	tests := []struct {
		name   string
		after  func() *promptGen
		within int
	}{
		{"prompt length +0.5 sd", func() *promptGen { return newGen(3, 60+0.5*15, 15, stationary) }, 500},
		{"language mix", func() *promptGen { return newGen(3, 60, 15, map[string]float64{"en": 0.6, "es": 0.1, "zh": 0.3}) }, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(cfg, 11)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			now, alarms, evals := run(t, m, newGen(1, 60, 15, stationary), start, 10000, rate, cfg.Interval, false)
			t.Logf("stationary: 10000 requests, %d evaluations, %d false alarms", evals, len(alarms))
			if len(alarms) != 0 {
				t.Errorf("stationary traffic raised drift %d times (after requests %v)", len(alarms), alarms)
			}
			_, alarms, _ = run(t, m, tt.after(), now, 2000, rate, cfg.Interval, true)
			if len(alarms) == 0 {
				t.Fatalf("drift not flagged within 2000 requests of the change; last result %+v", m.Last())
			}
			var why []string
			for _, f := range m.Last().Features {
				if f.Drift {
					why = append(why, fmt.Sprintf("%s/%s psi=%.2f", f.Name, f.Test, f.PSI))
				}
			}
			t.Logf("%s: flagged %d requests after the change (%v of simulated time); drifted: %v", tt.name, alarms[0],
				time.Duration(float64(alarms[0])/rate*float64(time.Second)), why)
			if alarms[0] > tt.within {
				t.Errorf("flagged after %d requests, want within %d", alarms[0], tt.within)
			}
		})
	}
}

// TestNoFalseAlarms runs 30,000 more stationary prompts, under three other
// seeds, and requires that none raises drift.
func TestNoFalseAlarms(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	cfg := config.Default().Analyzers
	for seed := uint64(100); seed < 103; seed++ {
		m, err := New(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		_, alarms, evals := run(t, m, newGen(seed, 60, 15, map[string]float64{"en": 0.9, "es": 0.1}), start, 10000, 5, cfg.Interval, false)
		if len(alarms) > 0 {
			t.Errorf("seed %d: %d false alarms in %d evaluations (after prompts %v)", seed, len(alarms), evals, alarms)
		}
	}
}
