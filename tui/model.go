package tui

import (
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
)

// Frame is the pause between a sample's arrival and the next sample, so at
// most 10 samples a second, and never two in flight.
const Frame = 100 * time.Millisecond

// Done is the end of a run, as the dashboard shows it until a key is
// pressed.
type Done struct {
	Verdict  string // PASS, FAIL, INCONCLUSIVE, INTERRUPTED, ERROR
	ExitCode int
	Reasons  []string
	Findings []Finding
	// Files are the outputs already written when the screen shows,
	// one line each ("report: r.json").
	Files []string
	// Interrupted (a signal, or q before the end): leave at once.
	Interrupted bool
}

// Finding is a finding as the done screen shows it.
type Finding struct {
	Severity, Title, Fix string
	Static               bool // from the doctor's checks
}

// DoneMsg tells the model the run has ended. Send it once.
type DoneMsg Done

type tickMsg time.Time

type snapshotMsg Snapshot

type pane int

const (
	panePods pane = iota
	paneLog
)

type keyMap struct {
	Quit, Focus, Help, Up, Down, PageUp, PageDown key.Binding
}

func (k keyMap) ShortHelp() []key.Binding { return []key.Binding{k.Quit, k.Focus, k.Help} }
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Quit, k.Focus, k.Help}, {k.Up, k.Down, k.PageUp, k.PageDown}}
}

var keys = keyMap{
	Quit:     key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "stop (the report is still written)")),
	Focus:    key.NewBinding(key.WithKeys("tab", "shift+tab"), key.WithHelp("tab", "focus pods / events")),
	Help:     key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
	Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "scroll up")),
	Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "scroll down")),
	PageUp:   key.NewBinding(key.WithKeys("pgup"), key.WithHelp("pgup", "page up")),
	PageDown: key.NewBinding(key.WithKeys("pgdown", "space"), key.WithHelp("pgdn", "page down")),
}

// Options configure the model.
type Options struct {
	// Sample returns the current snapshot; it is called from a tea.Cmd, at
	// most once per Frame and never concurrently.
	Sample func() Snapshot
	// Stop asks the run to stop (q before the end); the run then ends as
	// interrupted and the command sends DoneMsg.
	Stop func()
	// ExitWhenDone leaves as soon as the run ends instead of waiting for
	// a key.
	ExitWhenDone bool
	// Color: false renders without colour (NO_COLOR); layout and glyphs
	// carry the meaning alone.
	Color bool
}

// Model is the dashboard. It holds data only; View renders it.
type Model struct {
	opts          Options
	snap          Snapshot
	width, height int
	focus         pane
	scroll        [2]int // pods: rows from the top; log: rows up from the newest
	bodyScroll    int    // the end screen and the help: rows from the top
	showHelp      bool
	done          *Done
	endPanes      bool // after the end: the panes shown instead of the verdict (tab)
	stopping      bool
	st            styles
	help          help.Model
}

// New makes the model.
func New(opts Options) Model {
	h := help.New()
	if !opts.Color {
		plain := lipgloss.NewStyle()
		h.Styles = help.Styles{Ellipsis: plain, ShortKey: plain, ShortDesc: plain, ShortSeparator: plain,
			FullKey: plain, FullDesc: plain, FullSeparator: plain}
	}
	return Model{opts: opts, width: 80, height: 24, st: newStyles(opts.Color), help: h}
}

// Init starts sampling.
func (m Model) Init() tea.Cmd { return m.sample() }

func (m Model) sample() tea.Cmd {
	if m.opts.Sample == nil {
		return nil
	}
	sample := m.opts.Sample
	return func() tea.Msg { return snapshotMsg(sample()) }
}

// Update handles a message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case snapshotMsg:
		m.snap = Snapshot(msg)
		if m.done != nil {
			return m, nil // the final frame
		}
		// The next sample a frame later: one sample in flight at a time.
		return m, tea.Tick(Frame, func(t time.Time) tea.Msg { return tickMsg(t) })
	case tickMsg:
		if m.done == nil {
			return m, m.sample()
		}
	case DoneMsg:
		d := Done(msg)
		m.done = &d
		if m.opts.ExitWhenDone || m.stopping || d.Interrupted {
			return m, tea.Sequence(m.sample(), tea.Quit)
		}
		return m, m.sample()
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

func (m Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch {
	case key.Matches(msg, keys.Focus) && m.done != nil:
		// The end screen cycles through the verdict, then the pods and
		// the events panes as they were when the run ended.
		switch {
		case !m.endPanes:
			m.endPanes, m.focus = true, panePods
		case m.focus == panePods:
			m.focus = paneLog
		default:
			m.endPanes = false
		}
	case key.Matches(msg, keys.Focus):
		m.focus = 1 - m.focus
	case key.Matches(msg, keys.Help):
		m.showHelp = !m.showHelp
	case key.Matches(msg, keys.Up):
		m.scrollBy(-1)
	case key.Matches(msg, keys.Down):
		m.scrollBy(1)
	case key.Matches(msg, keys.PageUp):
		m.scrollBy(-m.paneRows())
	case key.Matches(msg, keys.PageDown):
		m.scrollBy(m.paneRows())
	case m.done != nil:
		// Done: any other key leaves.
		return m, tea.Quit
	case key.Matches(msg, keys.Quit):
		if !m.stopping {
			m.stopping = true
			if m.opts.Stop != nil {
				stop := m.opts.Stop
				return m, func() tea.Msg { stop(); return nil }
			}
		}
	}
	return m, nil
}

// scrollBy moves the focused pane (the end screen or help when shown); the
// log scrolls up from its newest line.
func (m *Model) scrollBy(n int) {
	if m.endScreen() || m.showHelp {
		m.bodyScroll = max(0, m.bodyScroll+n)
		return
	}
	if m.focus == paneLog {
		n = -n
	}
	m.scroll[m.focus] = max(0, m.scroll[m.focus]+n)
}

// endScreen says whether the body shows the run's end (verdict,
// findings, files) rather than the panes.
func (m Model) endScreen() bool { return m.done != nil && !m.endPanes }

// Done reports whether the model has seen the run end.
func (m Model) Done() bool { return m.done != nil }

// Stopping reports whether the user asked to stop before the run ended.
func (m Model) Stopping() bool { return m.stopping }

// View renders the dashboard.
func (m Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "rollprobe " + m.snap.Command
	return v
}
