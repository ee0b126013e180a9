// River evaluation for issue 25. Two measurements, River v0.51.2, pgx
// driver, RescueStuckJobsAfter 20 s (a takeover within 30 s needs a bound
// below it) and no job timeout (episodes run up to an hour):
//
//	kill: a worker process is SIGKILLed mid-job; how long until another
//	      client runs the job again (the takeover time)?
//	live: one live worker runs a job for 4 minutes; is it run again
//	      meanwhile (two owners of one episode)?
//
// Run as root (it starts a throwaway PostgreSQL as the service account):
//
//	cd scripts/benchdata/rivereval && go run . kill   # or: go run . live
//
// A module of its own, so River is not a dependency of the kernel.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type EpisodeArgs struct{ N int }

func (EpisodeArgs) Kind() string { return "episode" }

var runs atomic.Int64
var firstRerun atomic.Int64

type EpisodeWorker struct {
	river.WorkerDefaults[EpisodeArgs]
	d time.Duration
}

func (EpisodeWorker) Timeout(*river.Job[EpisodeArgs]) time.Duration { return -1 }

func (w EpisodeWorker) Work(ctx context.Context, job *river.Job[EpisodeArgs]) error {
	runs.Add(1)
	if job.Attempt > 1 {
		firstRerun.CompareAndSwap(0, time.Now().UnixNano())
	}
	fmt.Printf("%s pid %d: attempt %d of job %d starts\n", time.Now().Format("15:04:05.000"), os.Getpid(), job.Attempt, job.ID)
	time.Sleep(w.d)
	return nil
}

func client(pool *pgxpool.Pool, d time.Duration) *river.Client[pgx.Tx] {
	workers := river.NewWorkers()
	river.AddWorker(workers, &EpisodeWorker{d: d})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:              workers,
		RescueStuckJobsAfter: 20 * time.Second,
		JobTimeout:           -1,
	})
	if err != nil {
		panic(err)
	}
	return c
}

func main() {
	ctx := context.Background()
	if len(os.Args) == 3 && os.Args[1] == "worker" {
		pool, err := pgxpool.New(ctx, os.Args[2])
		if err != nil {
			panic(err)
		}
		c := client(pool, time.Hour)
		if err := c.Start(ctx); err != nil {
			panic(err)
		}
		select {}
	}
	dir, _ := os.MkdirTemp("", "rivereval-")
	os.Chmod(dir, 0o755)
	acct, err := pgcluster.ServiceAccount()
	if err != nil {
		panic(err)
	}
	cl, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir, NoSyncInit: true, RunAs: &acct})
	if err != nil {
		panic(err)
	}
	defer cl.Stop(ctx)
	if err := cl.CreateDatabase(ctx, "river"); err != nil {
		panic(err)
	}
	url := cl.AdminConnString("river")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	mig, _ := rivermigrate.New(riverpgxv5.New(pool), nil)
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		panic(err)
	}
	switch os.Args[1] {
	case "kill":
		ins, _ := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		if _, err := ins.Insert(ctx, EpisodeArgs{N: 1}, nil); err != nil {
			panic(err)
		}
		child := exec.Command(os.Args[0], "worker", url)
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			panic(err)
		}
		for {
			var st string
			_ = pool.QueryRow(ctx, `SELECT state FROM river_job LIMIT 1`).Scan(&st)
			if st == "running" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		_ = child.Process.Signal(syscall.SIGKILL)
		_ = child.Wait()
		killed := time.Now()
		fmt.Printf("%s worker process SIGKILLed mid-job\n", killed.Format("15:04:05.000"))
		c := client(pool, time.Second)
		if err := c.Start(ctx); err != nil {
			panic(err)
		}
		for firstRerun.Load() == 0 && time.Since(killed) < 8*time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		if n := firstRerun.Load(); n != 0 {
			fmt.Printf("kill: the job ran again %v after the worker died (RescueStuckJobsAfter 20s)\n", time.Unix(0, n).Sub(killed).Round(time.Millisecond))
		} else {
			fmt.Println("kill: the job never ran again within 8 minutes")
		}
	case "live":
		c := client(pool, 4*time.Minute)
		if err := c.Start(ctx); err != nil {
			panic(err)
		}
		if _, err := c.Insert(ctx, EpisodeArgs{N: 1}, nil); err != nil {
			panic(err)
		}
		time.Sleep(4*time.Minute + 10*time.Second)
		fmt.Printf("live: one job, one live worker for 4 minutes; Work ran %d times\n", runs.Load())
	}
}
