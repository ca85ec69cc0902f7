// Go baseline for the container hashing benchmark (benches/hashing.rs): the same corpus hashed
// the way kubelet's Go code does it (encoding/json decode into v1.Container, json.Marshal,
// go-spew's %#v dump into FNV-1a 32), built with the Go of the kubelet release measured. See
// README.md for what this is and is not.

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/davecgh/go-spew/spew"
)

// Quantity keeps the string it was given and prints it back ("0" when zero). apimachinery's
// parses and may canonicalise it, which costs more: so this baseline errs on Go's fast side.
type Quantity struct{ s string }

func (q Quantity) MarshalJSON() ([]byte, error) {
	s := q.s
	if s == "" {
		s = "0"
	}
	return []byte(`"` + s + `"`), nil
}

func (q *Quantity) UnmarshalJSON(v []byte) error {
	if string(v) == "null" {
		*q = Quantity{}
		return nil
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	s := strings.TrimSpace(string(v))
	if s == "" {
		return fmt.Errorf("quantities must match the regular expression")
	}
	q.s = s
	return nil
}

// IntOrString as intstr decodes and encodes it: a JSON string or an int32.
type IntOrString struct {
	Type   int
	IntVal int32
	StrVal string
}

func (x *IntOrString) UnmarshalJSON(v []byte) error {
	if len(v) > 0 && v[0] == '"' {
		x.Type = 1
		return json.Unmarshal(v, &x.StrVal)
	}
	x.Type = 0
	return json.Unmarshal(v, &x.IntVal)
}

func (x IntOrString) MarshalJSON() ([]byte, error) {
	if x.Type == 1 {
		return json.Marshal(x.StrVal)
	}
	return json.Marshal(x.IntVal)
}

// deepHashObject is pkg/util/hash.DeepHashObject: go-spew's %#v of the object into the hash.
func deepHashObject(h hash.Hash, o interface{}) {
	h.Reset()
	printer := spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}
	printer.Fprintf(h, "%#v", o)
}

// hashContainer is kubelet's HashContainer: era A/B hash the whole container's JSON, era C
// (1.31+) only {"image":..,"name":..} (a map, so Go sorts the keys).
func hashContainer(c *Container, eraC bool) uint64 {
	h := fnv.New32a()
	var j []byte
	if eraC {
		j, _ = json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	} else {
		j, _ = json.Marshal(c)
	}
	deepHashObject(h, j)
	return uint64(h.Sum32())
}

type golden struct {
	Tag       string  `json:"tag"`
	InputText string  `json:"input_text"`
	Hash      *string `json:"hash"`
}

func pass(inputs [][]byte, eraC bool) uint64 {
	var acc uint64
	for _, in := range inputs {
		var c Container
		if json.Unmarshal(in, &c) == nil {
			acc ^= hashContainer(&c, eraC)
		}
	}
	return acc
}

// hashOnly hashes containers decoded beforehand: kubelet's HashContainer alone.
func hashOnly(cs []*Container, eraC bool) uint64 {
	var acc uint64
	for _, c := range cs {
		acc ^= hashContainer(c, eraC)
	}
	return acc
}

func main() {
	file := flag.String("golden", "", "a golden .jsonl file")
	era := flag.String("era", "A", "A (1.16-1.30) or C (1.31+)")
	seconds := flag.Float64("seconds", 3, "time per round")
	rounds := flag.Int("rounds", 5, "rounds per workload")
	dump := flag.String("dump", "", "write each input's tag and hashed JSON here (a JSON line each) and stop")
	flag.Parse()
	eraC := *era == "C"
	text, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var all, small [][]byte
	var allDecoded, smallDecoded []*Container
	matched, differ := 0, []string{}
	for _, line := range strings.Split(string(text), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var g golden
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		in := []byte(g.InputText)
		all = append(all, in)
		if !strings.HasPrefix(g.Tag, "big-") {
			small = append(small, in)
		}
		// Fidelity: does this replica hash each input as the real kubelet did?
		var c Container
		got := "rejected"
		if json.Unmarshal(in, &c) == nil {
			got = strconv.FormatUint(hashContainer(&c, eraC), 16)
			allDecoded = append(allDecoded, &c)
			if !strings.HasPrefix(g.Tag, "big-") {
				smallDecoded = append(smallDecoded, &c)
			}
		}
		want := "rejected"
		if g.Hash != nil {
			want = *g.Hash
		}
		if got == want {
			matched++
		} else {
			differ = append(differ, g.Tag)
		}
	}
	if *dump != "" {
		writeHashedJSON(*dump, text, eraC)
		return
	}
	fmt.Printf("%s, GOMAXPROCS %d: %d of %d inputs hashed as the golden file says", runtime.Version(), runtime.GOMAXPROCS(0), matched, len(all))
	if len(differ) > 0 {
		fmt.Printf("; differ: %s", strings.Join(differ, " "))
	}
	fmt.Println()
	type workload struct {
		label string
		count int
		run   func()
	}
	for _, w := range []workload{
		{"decode and hash, all inputs", len(all), func() { pass(all, eraC) }},
		{"decode and hash, without big-*", len(small), func() { pass(small, eraC) }},
		{"hash of decoded containers, all accepted inputs", len(allDecoded), func() { hashOnly(allDecoded, eraC) }},
		{"hash of decoded containers, without big-*", len(smallDecoded), func() { hashOnly(smallDecoded, eraC) }},
	} {
		var rates []float64
		for r := 0; r < *rounds; r++ {
			n, start := 0, time.Now()
			for time.Since(start).Seconds() < *seconds {
				w.run()
				n++
			}
			rates = append(rates, float64(n*w.count)/time.Since(start).Seconds())
		}
		sort.Float64s(rates)
		fmt.Printf("era %s, %s (%d): median %.0f hashes/s, best %.0f (%d rounds of %.0f s)\n", *era, w.label, w.count, rates[len(rates)/2], rates[len(rates)-1], *rounds, *seconds)
	}
}

// writeHashedJSON writes, per golden input Go accepts, its tag and the JSON HashContainer
// hashes, so that where this baseline differs from the golden file can be seen field by field.
func writeHashedJSON(path string, text []byte, eraC bool) {
	out, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer out.Close()
	enc := json.NewEncoder(out)
	for _, line := range strings.Split(string(text), "\n") {
		var g golden
		if strings.TrimSpace(line) == "" || json.Unmarshal([]byte(line), &g) != nil {
			continue
		}
		var c Container
		if json.Unmarshal([]byte(g.InputText), &c) != nil {
			continue
		}
		var j []byte
		if eraC {
			j, _ = json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
		} else {
			j, _ = json.Marshal(&c)
		}
		enc.Encode(map[string]string{"tag": g.Tag, "hashed_json": string(j)})
	}
}
