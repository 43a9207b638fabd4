module github.com/roverml/rover

go 1.26.0

require (
	connectrpc.com/connect v1.19.1
	github.com/google/go-cmp v0.7.0
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.12
)

tool (
	connectrpc.com/connect/cmd/protoc-gen-connect-go
	google.golang.org/protobuf/cmd/protoc-gen-go
)
