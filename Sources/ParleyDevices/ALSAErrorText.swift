import CALSA

enum ALSAErrorText {
    static func text(_ code: Int32) -> String { String(cString: snd_strerror(code)) }
}
