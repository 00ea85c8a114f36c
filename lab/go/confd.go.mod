module github.com/kelseyhightower/confd

go 1.21

require (
	github.com/BurntSushi/toml v0.3.0
	github.com/fsnotify/fsnotify v1.4.7
	github.com/kelseyhightower/memkv v0.1.1
	github.com/sirupsen/logrus v1.0.5
	github.com/xordataexchange/crypt v0.0.3-0.20170626215501-b2862e3d0a77
	gopkg.in/yaml.v2 v2.2.1
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/crypto v0.17.0 // indirect
	golang.org/x/sys v0.15.0 // indirect
	golang.org/x/term v0.15.0 // indirect
	gopkg.in/airbrake/gobrake.v2 v2.0.9 // indirect
	gopkg.in/gemnasium/logrus-airbrake-hook.v2 v2.1.2 // indirect
)
