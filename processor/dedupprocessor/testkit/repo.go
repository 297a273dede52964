package testkit

import (
	"errors"
	"os"
	"path/filepath"
)

// RepoRoot returns the repository root: the nearest directory at or above the
// working directory that holds builder-config.yaml.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "builder-config.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testkit: builder-config.yaml not found in the working directory or any parent")
		}
		dir = parent
	}
}
