package loadtest_test

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/combmq/comb/broker"
	"github.com/combmq/comb/internal/cli"
)

// There is no Docker engine on the development machines, so this test is
// what keeps docker-compose.yml and the Dockerfile true to the code: the
// services, their ports and wiring, and every flag passed to comb, which
// must parse with the real flag sets of `comb serve` and `comb loadtest`.

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Ports       []string          `yaml:"ports"`
	Profiles    []string          `yaml:"profiles"`
	Pid         string            `yaml:"pid"`
	User        string            `yaml:"user"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Volumes     []string       `yaml:"volumes"`
	Healthcheck map[string]any `yaml:"healthcheck"`
	ShmSize     string         `yaml:"shm_size"`
	Restart     string         `yaml:"restart"`
}

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var f composeFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true) // a misspelt key is an error, not a silent no-op
	require.NoError(t, dec.Decode(&f))
	return f
}

// flagValues reads -name value, -name=value and bare boolean -name from a
// command's arguments (after the subcommand).
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		require.True(t, strings.HasPrefix(a, "-"), "argument %q is not a flag", a)
		name := strings.TrimLeft(a, "-")
		if k, v, ok := strings.Cut(name, "="); ok {
			out[k] = v
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[name] = args[i+1]
			i++
			continue
		}
		out[name] = "true"
	}
	return out
}

// parsesWithRealFlags runs `comb <cmd> <args> -h`: the flag package parses
// every argument before it reaches -h, so exit 0 means every flag exists
// and every value parses; anything else prints why.
func parsesWithRealFlags(t *testing.T, cmd string, args []string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, Exit: func(int) {}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := cli.Run(ctx, env, append(append([]string{cmd}, args...), "-h"))
	require.Zero(t, code, "comb %s %s: %s", cmd, strings.Join(args, " "), stderr.String())
	for name := range flagValues(t, args) {
		require.Contains(t, stderr.String()+stdout.String(), "-"+name+", $"+cli.EnvName(name), "comb %s -h documents -%s", cmd, name)
	}
}

// containerPorts maps the container side of "[host_ip:]host:container"
// mappings to their host side.
func containerPorts(t *testing.T, ports []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range ports {
		i := strings.LastIndexByte(p, ':')
		require.Positive(t, i, "port mapping %q", p)
		out[p[i+1:]] = p[:i]
	}
	return out
}

// requiredVar matches a compose interpolation of a variable that must be
// set, with no default: ${NAME:?message}. It gives the variable's name.
var requiredVar = regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*):\?[^}]+\}`)

// secretFrom returns the variable a secret's value is taken from, and
// fails unless the value is exactly a required interpolation: no fixed
// password, no default one.
func secretFrom(t *testing.T, what, value string) string {
	t.Helper()
	m := requiredVar.FindStringSubmatch(value)
	require.NotNil(t, m, "%s = %q: want ${VAR:?message}, not a fixed value", what, value)
	require.Equal(t, m[0], value, "%s is the variable alone", what)
	return m[1]
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	names := make([]string, 0, len(f.Services))
	for n := range f.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	require.Equal(t, []string{"comb", "comb-2", "comb-3", "loadtest", "postgres"}, names)

	// PostgreSQL: durable commits, spaced checkpoints, enough WAL.
	pg := f.Services["postgres"]
	require.Empty(t, pg.Profiles, "postgres runs in plain `docker compose up`")
	require.True(t, strings.HasPrefix(pg.Image, "postgres:15"), "the major version the tests run against")
	require.Empty(t, pg.Ports, "PostgreSQL's port is not published")
	require.NotEmpty(t, pg.Healthcheck)
	require.Equal(t, "postgres", pg.Command[0])
	settings := map[string]string{}
	for i := 1; i < len(pg.Command); i += 2 {
		require.Equal(t, "-c", pg.Command[i])
		require.Less(t, i+1, len(pg.Command))
		k, v, ok := strings.Cut(pg.Command[i+1], "=")
		require.True(t, ok, pg.Command[i+1])
		settings[k] = v
	}
	require.Equal(t, "on", settings["synchronous_commit"], "a push reply means durable")
	require.Equal(t, "on", settings["fsync"])
	require.GreaterOrEqual(t, sizeGB(t, settings["max_wal_size"]), 4.0, "max_wal_size large enough to space checkpoints")
	cpt, err := time.ParseDuration(strings.TrimSuffix(settings["checkpoint_timeout"], "in")) // 15min -> 15m
	require.NoError(t, err)
	require.GreaterOrEqual(t, cpt, 10*time.Minute)
	for _, k := range []string{"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"} {
		require.NotEmpty(t, pg.Environment[k], k)
	}
	pgPassword := secretFrom(t, "postgres POSTGRES_PASSWORD", pg.Environment["POSTGRES_PASSWORD"])

	// Comb, built from the repository's Dockerfile.
	cb := f.Services["comb"]
	require.Empty(t, cb.Profiles, "comb runs in plain `docker compose up`")
	require.NotNil(t, cb.Build)
	require.Equal(t, ".", cb.Build.Context)
	require.Equal(t, "Dockerfile", cb.Build.Dockerfile)
	require.NotEmpty(t, cb.Image, "the loader reuses the image by name")
	require.Equal(t, "service_healthy", cb.DependsOn["postgres"].Condition)
	require.Equal(t, "serve", cb.Command[0])
	parsesWithRealFlags(t, "serve", cb.Command[1:])
	serve := flagValues(t, cb.Command[1:])
	_, natsPort, err := net.SplitHostPort(serve["nats-listen"])
	require.NoError(t, err)
	ports := containerPorts(t, cb.Ports)
	require.Contains(t, ports, natsPort, "the NATS port is published")
	require.Equal(t, "127.0.0.1:"+serve["nats-http"], ports[serve["nats-http"]],
		"the monitoring port (no authentication) is published on the host's loopback only")
	pgURL, err := url.Parse(serve["postgres-url"])
	require.NoError(t, err)
	require.Equal(t, "postgres", pgURL.Hostname(), "serve reaches the postgres service")
	require.Equal(t, "5432", pgURL.Port())
	require.Equal(t, pg.Environment["POSTGRES_USER"], pgURL.User.Username())
	_, inURL := pgURL.User.Password()
	require.False(t, inURL, "no password on the command line")
	require.Equal(t, pgPassword, secretFrom(t, "comb PGPASSWORD", cb.Environment["PGPASSWORD"]),
		"pgx reads the database password from PGPASSWORD")
	require.Equal(t, "/"+pg.Environment["POSTGRES_DB"], pgURL.Path)
	require.True(t, hasMount(cb.Volumes, serve["data-dir"]), "the data directory is a volume")

	// NATS authentication: the mounted comb.conf requires the token that
	// the environment gives.
	tokenVar := secretFrom(t, "comb COMB_NATS_TOKEN", cb.Environment["COMB_NATS_TOKEN"])
	require.Equal(t, "COMB_NATS_TOKEN", tokenVar)
	require.True(t, hasMount(cb.Volumes, serve["config"]), "the configuration file is mounted")
	requireTokenAuth(t, "../"+mountSource(t, cb.Volumes, serve["config"]), tokenVar)

	// The loader, only under the soak profile.
	lt := f.Services["loadtest"]
	require.Equal(t, []string{"soak"}, lt.Profiles)
	require.Equal(t, cb.Image, lt.Image)
	require.Contains(t, lt.DependsOn, "comb")
	require.Equal(t, "loadtest", lt.Command[0])
	parsesWithRealFlags(t, "loadtest", lt.Command[1:])
	load := flagValues(t, lt.Command[1:])
	require.NotContains(t, load, "nats", "the NATS URL, token and all, comes from the environment")
	// What compose makes of the URL once the variables are set.
	natsEnv := requiredVar.ReplaceAllStringFunc(lt.Environment[cli.EnvName("nats")], func(ref string) string {
		return "value-of-" + requiredVar.FindStringSubmatch(ref)[1]
	})
	natsURL, err := url.Parse(natsEnv)
	require.NoError(t, err)
	require.Equal(t, "comb", natsURL.Hostname(), "the loader reaches the comb service")
	require.Equal(t, natsPort, natsURL.Port())
	require.Equal(t, "value-of-"+tokenVar, natsURL.User.Username(), "the loader gives comb's token")
	require.Equal(t, pgPassword, secretFrom(t, "loadtest PGPASSWORD", lt.Environment["PGPASSWORD"]))
	require.Equal(t, serve["postgres-url"], load["postgres-url"], "the sampler reads the broker's database")
	require.Equal(t, "service:comb", lt.Pid, "the sampler sees comb's process")
	require.Equal(t, "1", load["broker-pid"], "comb is pid 1 of its container")
	require.Equal(t, "true", load["verify"])
	require.True(t, hasMount(lt.Volumes, load["out"]), "the loader's files land on the host")
	for _, k := range []string{"openloop", "200", "100", "256"} {
		require.Contains(t, lt.Command, k, "the reference shape")
	}
	require.Equal(t, "openloop", load["mode"])

	for _, v := range []string{"pgdata", "combdata"} {
		require.Contains(t, f.Volumes, v)
	}
}

// mountSource returns the host side of the bind mount at target, relative
// to the compose file.
func mountSource(t *testing.T, volumes []string, target string) string {
	t.Helper()
	for _, v := range volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == target {
			return strings.TrimPrefix(parts[0], "./")
		}
	}
	t.Fatalf("nothing mounted at %s", target)
	return ""
}

// The cluster profile: comb, comb-2 and comb-3 in one NATS cluster on the
// one PostgreSQL, with comb's secrets, the routes naming each other on the
// route port of comb-cluster.conf, their password the token, and neither
// the route port nor PostgreSQL's published.
func TestComposeClusterProfile(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	members := []string{"comb", "comb-2", "comb-3"}
	cb := f.Services["comb"]
	base := flagValues(t, cb.Command[1:])
	tokenVar := secretFrom(t, "comb COMB_NATS_TOKEN", cb.Environment["COMB_NATS_TOKEN"])
	pgVar := secretFrom(t, "comb PGPASSWORD", cb.Environment["PGPASSWORD"])

	// The configuration every member loads: comb-cluster.conf, which
	// includes comb.conf, through comb serve's own loader.
	conf := mountSource(t, cb.Volumes, base["config"])
	cfg := loadDeployConf(t, "../"+conf, tokenVar)
	require.Equal(t, "t0ken-from-env", cfg.NATS.Options.Authorization, "clients give the token")
	cl := cfg.NATS.Options.Cluster
	require.NotEmpty(t, cl.Name, "a cluster name")
	require.Equal(t, "0.0.0.0", cl.Host, "routes reach the container's network")
	require.NotZero(t, cl.Port)
	routePort := strconv.Itoa(cl.Port)
	require.NotEmpty(t, cl.Username, "routes must authenticate")
	require.Equal(t, "t0ken-from-env", cl.Password, "the routes' password is the token")

	natsPorts := map[string]bool{}
	dataDirs := map[string]bool{}
	named := map[[2]string]bool{} // member -> a member its routes name
	for _, name := range members {
		s, ok := f.Services[name]
		require.True(t, ok, "service %s", name)
		if name != "comb" {
			require.Equal(t, []string{"cluster"}, s.Profiles, name)
			require.Equal(t, cb.Image, s.Image, "%s runs the image comb builds", name)
			require.Contains(t, s.DependsOn, "comb", "%s starts after the seed", name)
		}
		require.Equal(t, "service_healthy", s.DependsOn["postgres"].Condition, name)
		require.Equal(t, "serve", s.Command[0], name)
		parsesWithRealFlags(t, "serve", s.Command[1:])
		serve := flagValues(t, s.Command[1:])
		require.Equal(t, base["config"], serve["config"], "%s loads the cluster configuration", name)
		require.True(t, hasMount(s.Volumes, serve["config"]), "%s mounts the configuration", name)
		require.Equal(t, conf, mountSource(t, s.Volumes, serve["config"]), name)
		require.True(t, hasMount(s.Volumes, "/etc/comb/comb.conf"), "%s mounts the file comb-cluster.conf includes", name)
		require.Equal(t, name, serve["server-name"], "%s names its server after itself", name)
		require.Equal(t, base["postgres-url"], serve["postgres-url"], "%s shares comb's PostgreSQL", name)
		for _, k := range []string{"cluster-name", "cluster-listen", "routes"} {
			require.NotContains(t, serve, k, "%s: the cluster comes from the file and COMB_ROUTES", name)
		}
		require.Equal(t, tokenVar, secretFrom(t, name+" COMB_NATS_TOKEN", s.Environment["COMB_NATS_TOKEN"]), name)
		require.Equal(t, pgVar, secretFrom(t, name+" PGPASSWORD", s.Environment["PGPASSWORD"]), name)

		// Ports: NATS and monitoring on the host's loopback, each member
		// its own host port; neither routes nor PostgreSQL published.
		ports := containerPorts(t, s.Ports)
		_, natsPort, err := net.SplitHostPort(serve["nats-listen"])
		require.NoError(t, err)
		require.Contains(t, ports, natsPort, name)
		require.True(t, strings.HasPrefix(ports[natsPort], "127.0.0.1:"), "%s publishes NATS on loopback: %s", name, ports[natsPort])
		require.False(t, natsPorts[ports[natsPort]], "%s: host port %s taken twice", name, ports[natsPort])
		natsPorts[ports[natsPort]] = true
		require.True(t, strings.HasPrefix(ports[serve["nats-http"]], "127.0.0.1:"), "%s: monitoring on loopback only", name)
		require.NotContains(t, ports, routePort, "%s: the route port stays on the compose network", name)
		require.NotContains(t, ports, "5432", "%s: PostgreSQL is not published", name)
		require.True(t, hasMount(s.Volumes, serve["data-dir"]), "%s: the data directory is a volume", name)
		for _, v := range s.Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == serve["data-dir"] {
				require.False(t, dataDirs[parts[0]], "%s shares data volume %s", name, parts[0])
				dataDirs[parts[0]] = true
				require.Contains(t, f.Volumes, parts[0], "%s: a named volume", name)
			}
		}

		// Routes, as compose makes them once the variables are set, and
		// as serve's -routes setting reads them.
		raw, ok := s.Environment[cli.EnvName("routes")]
		if name == "comb" {
			require.False(t, ok, "comb is the seed: it names no route, so it also runs alone")
			continue
		}
		routes := requiredVar.ReplaceAllStringFunc(raw, func(ref string) string {
			return "value-of-" + requiredVar.FindStringSubmatch(ref)[1]
		})
		require.NotContains(t, routes, "$", "%s: every variable of COMB_ROUTES is a required one", name)
		rcfg := cfg
		require.NoError(t, routesSetting(t).Value(&rcfg).Set(routes), name)
		require.NoError(t, rcfg.Validate(), name)
		for _, r := range rcfg.NATS.Cluster.Routes {
			u, err := url.Parse(r)
			require.NoError(t, err)
			require.Equal(t, "nats-route", u.Scheme, r)
			require.Contains(t, members, u.Hostname(), "%s routes to a member", name)
			require.NotEqual(t, name, u.Hostname(), "%s routes to itself", name)
			require.Equal(t, routePort, u.Port(), "%s: the members' route port", name)
			require.Equal(t, cl.Username, u.User.Username(), name)
			pass, _ := u.User.Password()
			require.Equal(t, "value-of-"+tokenVar, pass, "%s: the routes' password is the token", name)
			named[[2]string{name, u.Hostname()}] = true
		}
	}
	// A full mesh: every pair is joined by a route one of them names (the
	// seed learns the others when they connect).
	for i, a := range members {
		for _, b := range members[i+1:] {
			require.True(t, named[[2]string{a, b}] || named[[2]string{b, a}], "no route joins %s and %s", a, b)
		}
	}
	require.True(t, named[[2]string{"comb-2", "comb-3"}] && named[[2]string{"comb-3", "comb-2"}], "comb-2 and comb-3 name each other")
	require.Empty(t, f.Services["postgres"].Ports, "PostgreSQL's port is not published")
	for _, v := range []string{"combdata-2", "combdata-3"} {
		require.Contains(t, f.Volumes, v)
	}
}

// routesSetting is serve's -routes setting, from the one table.
func routesSetting(t *testing.T) broker.Setting {
	t.Helper()
	for _, s := range broker.Settings() {
		if s.Key == "routes" {
			return s
		}
	}
	t.Fatal("no routes setting")
	return broker.Setting{}
}

// requireTokenAuth loads a configuration file through comb serve's loader,
// with the token variable defined, and checks that NATS requires the token.
func requireTokenAuth(t *testing.T, path, tokenVar string) {
	t.Helper()
	cfg := loadDeployConf(t, path, tokenVar)
	require.Equal(t, "t0ken-from-env", cfg.NATS.Options.Authorization, "NATS requires the token")
	require.Equal(t, "0.0.0.0", cfg.NATS.Options.HTTPHost, "monitoring reaches the container's network (the host publishes it on loopback)")
}

// loadDeployConf loads a configuration file of deploy/ through comb serve's
// loader, with tokenVar defined as "t0ken-from-env", after checking that
// no file there holds a fixed secret. nats-server resolves $VAR from a
// file's own variables before the environment, and an included file's
// from itself: each file is copied with the variable defined (which keeps
// the tests parallel), under its own name, so includes find their copies.
func loadDeployConf(t *testing.T, path, tokenVar string) broker.Config {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*.conf"))
	require.NoError(t, err)
	require.Contains(t, files, filepath.Clean(path))
	for _, f := range files {
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NotRegexp(t, `(?im)^\s*[a-z_]*(token|password)\s*[:=]\s*[^$\s]`, string(body), "no fixed secret in %s", f)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)),
			append([]byte(tokenVar+": \"t0ken-from-env\"\n"), body...), 0o600))
	}
	cfg := broker.DefaultConfig()
	_, err = cfg.LoadFile(filepath.Join(dir, filepath.Base(path)))
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	return cfg
}

func hasMount(volumes []string, target string) bool {
	for _, v := range volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == target {
			return true
		}
	}
	return false
}

// sizeGB reads a PostgreSQL size setting such as 16GB or 4096MB.
func sizeGB(t *testing.T, s string) float64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)(MB|GB|TB)$`).FindStringSubmatch(s)
	require.NotNil(t, m, "size %q", s)
	n, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	switch m[2] {
	case "MB":
		return n / 1024
	case "TB":
		return n * 1024
	}
	return n
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	df := string(b)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	require.GreaterOrEqual(t, len(froms), 2, "a multi-stage build")
	gomod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	require.NotNil(t, goVer)
	require.Equal(t, "golang:"+string(goVer[1]), froms[0][1], "the build stage uses go.mod's Go release")
	require.Contains(t, df, "./cmd/comb")
	require.Regexp(t, `(?m)^ENTRYPOINT \["/usr/local/bin/comb"\]`, df)
	require.Regexp(t, `(?m)^EXPOSE .*\b4222\b`, df)
	require.Contains(t, df, "COPY --from=build /out/comb /usr/local/bin/comb")

	require.Contains(t, df, "COPY deploy/comb.conf /etc/comb/comb.conf", "the image has the configuration that turns authentication on")

	// The image's default command is a valid `comb serve`.
	cmd := regexp.MustCompile(`(?m)^CMD \[(.*)\]`).FindStringSubmatch(df)
	require.NotNil(t, cmd)
	var args []string
	for a := range strings.SplitSeq(cmd[1], ",") {
		args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
	}
	require.Equal(t, "serve", args[0])
	parsesWithRealFlags(t, "serve", args[1:])
	require.Equal(t, "/etc/comb/comb.conf", flagValues(t, args[1:])["config"], "authentication on by default")
}
