package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// strict: the SDK returns an empty cog.BuildErrors (a typed nil) when nothing failed
func strict(err error) error {
	if be, ok := err.(cog.BuildErrors); ok && len(be) == 0 {
		return nil
	}
	return err
}

func main() {
	plugins.RegisterDefaultPlugins()
	rc := 0
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			rc = 1
			continue
		}
		var d dashboard.Dashboard
		if err := strict(d.UnmarshalJSONStrict(raw)); err != nil {
			fmt.Printf("%s: not a Grafana dashboard: %v\n", path, err)
			rc = 1
			continue
		}
		if err := strict(d.Validate()); err != nil {
			fmt.Printf("%s: invalid: %v\n", path, err)
			rc = 1
			continue
		}
		fmt.Printf("%s: ok (%d panels, schemaVersion %d)\n", path, len(d.Panels), d.SchemaVersion)
	}
	os.Exit(rc)
}
