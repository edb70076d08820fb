// The copy button next to a new API key: the only script on the dashboard.
// The button stays hidden without JavaScript (the key can still be selected
// and copied by hand) and without a clipboard (plain HTTP on a non-local host).
'use strict'
document.addEventListener('DOMContentLoaded', () => {
  for (const button of document.querySelectorAll('button[data-copy]')) {
    const source = document.getElementById(button.dataset.copy)
    if (!source || !navigator.clipboard) continue
    button.hidden = false
    button.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(source.textContent.trim())
        button.textContent = 'Copied'
      } catch {
        button.textContent = 'Select and copy it by hand'
      }
      setTimeout(() => { button.textContent = 'Copy' }, 2000)
    })
  }
})
