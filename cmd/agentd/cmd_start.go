package main

import (
	"context"

	"github.com/stateguard/stateguard/service"
)

func init() {
	register(verb{name: "start", summary: "start the installed service", run: func(ctx context.Context, args []string) int {
		return controlVerb(ctx, "start", args, defaultServiceDeps(), (*service.Manager).Start)
	}})
}
