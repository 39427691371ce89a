// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3/etcdmain),
// built from the module version that k8s.io/kubernetes itself requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
