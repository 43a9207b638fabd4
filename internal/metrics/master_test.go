package metrics

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fakeRequest struct {
	connect.AnyRequest
	spec connect.Spec
}

func (r fakeRequest) Spec() connect.Spec { return r.spec }

// TestInterceptorTimesByProcedureAndCode: each unary call is timed under
// its procedure and its Connect code; a nil Master's interceptor adds
// nothing.
func TestInterceptorTimesByProcedureAndCode(t *testing.T) {
	m := NewMaster(func() JobSnapshot { return JobSnapshot{} }, false)
	ok := m.Interceptor().WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, nil })
	bad := m.Interceptor().WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no"))
	})
	req := fakeRequest{spec: connect.Spec{Procedure: "/rover.v1.MasterService/LeaseShards"}}
	for range 3 {
		_, _ = ok(context.Background(), req)
	}
	_, _ = bad(context.Background(), req)
	if n := testutil.CollectAndCount(m.rpc); n != 2 {
		t.Errorf("%d series, want one per code", n)
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	var none *Master
	next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, nil }
	if _, err := none.Interceptor().WrapUnary(next)(context.Background(), req); err != nil {
		t.Error(err)
	}
}

// BenchmarkInterceptor is what timing a unary RPC adds to it.
//
//	go test -run '^$' -bench Interceptor ./internal/metrics/
func BenchmarkInterceptor(b *testing.B) {
	m := NewMaster(func() JobSnapshot { return JobSnapshot{} }, false)
	call := m.Interceptor().WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, nil })
	req := fakeRequest{spec: connect.Spec{Procedure: "/rover.v1.MasterService/LeaseShards"}}
	ctx := context.Background()
	for b.Loop() {
		_, _ = call(ctx, req)
	}
}
