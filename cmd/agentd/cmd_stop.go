package main

import (
	"context"

	"github.com/stateguard/stateguard/service"
)

func init() {
	register(verb{name: "stop", summary: "stop the service (it stays installed)", run: func(ctx context.Context, args []string) int {
		return controlVerb(ctx, "stop", args, defaultServiceDeps(), (*service.Manager).Stop)
	}})
}
