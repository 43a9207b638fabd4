// Package rover is the root of Rover, an elastic, fault-tolerant launcher and job
// master for distributed deep-learning training. The binary lives in cmd/rover;
// the packages under internal/ hold the master, the node agent and their cores.
package rover
