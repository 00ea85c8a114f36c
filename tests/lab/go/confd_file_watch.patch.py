"""Replace confd v0.16.0's file-backend watchChanges with the fixed form.

Upstream's goroutine outlives the wait: once the watcher and the output
channel are closed it reads the closed Errors channel and sends on the closed
output channel -> "panic: send on closed channel" on the first values.yaml
event (seen in the lab). k3d's fork does not crash there. This keeps the
behaviour the fork documents (a fresh watcher per wait, return on the first
write/create/remove event) and lets the goroutine end with the wait.
"""
import re
import sys

path = sys.argv[1]
src = open(path).read()
fixed = '''func (c *Client) watchChanges(watcher *fsnotify.Watcher, stopChan chan bool) ResultError {
	outputChannel := make(chan ResultError, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case event, ok := <-watcher.Events:
				if !ok {
					return
				}
				log.Debug("event:", event)
				if event.Op&fsnotify.Write == fsnotify.Write ||
					event.Op&fsnotify.Remove == fsnotify.Remove ||
					event.Op&fsnotify.Create == fsnotify.Create {
					outputChannel <- ResultError{response: 1, err: nil}
					return
				}
			case err, ok := <-watcher.Errors:
				if !ok {
					return
				}
				outputChannel <- ResultError{response: 0, err: err}
				return
			case <-stopChan:
				outputChannel <- ResultError{response: 1, err: nil}
				return
			case <-done:
				return
			}
		}
	}()
	return <-outputChannel
}
'''
new, n = re.subn(r"func \(c \*Client\) watchChanges\(.*?\n}\n", fixed, src, count=1, flags=re.S)
if n != 1:
    sys.exit("watchChanges not found in %s" % path)
open(path, "w").write(new)
