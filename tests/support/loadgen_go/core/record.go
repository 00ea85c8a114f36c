package core

// The parts of the JSON record both generators print, each embedded where its
// keys stood before the generators shared them (encoding/json keeps an
// embedded struct's keys at its place, so the key order is unchanged).

// Head names the generator, its build and the target.
type Head struct {
	Generator string `json:"generator"`
	Build     string `json:"build"` // the hash of the sources (lab/lab.sh sets it)
	Go        string `json:"go"`
	Target    string `json:"target"`
}

// Lateness is how late the sends (starts) went out after their due time.
type Lateness struct {
	LatenessP50S *float64 `json:"lateness_p50_s"`
	LatenessP99S *float64 `json:"lateness_p99_s"`
	LatenessMaxS *float64 `json:"lateness_max_s"`
}

// CPU is the process's CPU time over the run.
type CPU struct {
	UserS   float64 `json:"user_s"`   // over wall_s, this process's threads
	SystemS float64 `json:"system_s"` // (getrusage RUSAGE_SELF)
}

// CPUBetween is the CPU time from Rusage's cpu0 to its cpu1.
func CPUBetween(cpu0, cpu1 [2]float64) CPU {
	return CPU{UserS: Round6(cpu1[0] - cpu0[0]), SystemS: Round6(cpu1[1] - cpu0[1])}
}

// Judgement is the generator's own verdict: whether the run measured the
// target or (partly) the generator itself, and why.
type Judgement struct {
	Valid          bool   `json:"valid"`
	InvalidBecause string `json:"invalid_because"`
}
