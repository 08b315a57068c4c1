package main

import (
	"context"

	"github.com/stateguard/stateguard/service"
)

func init() {
	register(verb{name: "restart", summary: "restart the service (start it if stopped)", run: func(ctx context.Context, args []string) int {
		return controlVerb(ctx, "restart", args, defaultServiceDeps(), (*service.Manager).Restart)
	}})
}
